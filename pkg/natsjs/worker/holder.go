package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/tool"
)

// An answer's attempt goes to the worker that holds the call's open work
// (SPEC §16: an MCP call parked on an elicitation lives in the memory of
// the worker that ran it). That worker names itself in the deferral
// (holdAnswer, tool.AnswerHolderMetaKey), the agent copies the name onto
// the attempt that brings the answer, and a worker of another ID that
// pulls that attempt hands it back (ruleAnswerHolder) for the holder to
// pull. The name only routes: the holder continues only a call it holds,
// and answers any other as its tool does (an MCP tool: effect unknown).
const (
	// holderNakDelay is the redelivery delay of an answer's attempt handed
	// back for its holder, per delivery so far (short: a person waits for
	// it), at most maxHolderNakDelay.
	holderNakDelay    = 50 * time.Millisecond
	maxHolderNakDelay = time.Second
	// maxHolderDeliveries is how many deliveries an answer's attempt may
	// take to reach its holder before a worker that is not the holder runs
	// it anyway (its tool then answers as for a holder gone); below the
	// tool's delivery limit when it has one.
	maxHolderDeliveries = 16
)

// holdAnswer names this worker in the metadata of a deferral whose answer
// goes to the call's next attempt (tool.AnswersNextAttempt): the worker
// holds the call's open work, and that attempt is for it.
func (w *Worker) holdAnswer(o outcome) outcome {
	if o.err == nil {
		return o // no allocation for a tool that returned a value
	}
	var cd *tool.CallDeferred
	if !errors.As(o.err, &cd) || !tool.AnswersNextAttempt(cd.Metadata) {
		return o
	}
	md := maps.Clone(cd.Metadata)
	md[tool.AnswerHolderMetaKey] = w.cfg.ID
	o.err = &tool.CallDeferred{Metadata: md}
	return o
}

// ruleAnswerHolder: an attempt that brings an answer to a call another
// worker holds (its ToolCallMetadata's tool.AnswerHolderMetaKey names a
// worker of another ID) is handed back after a short delay, without a
// result and not counted as a failure, so that the holder pulls it. It
// goes on here when the holder is gone (no registry entry of the tool for
// it: stopped, or its entry lapsed) or when it was delivered
// maxHolderDeliveries times (a holder alive that never pulls it): the
// tool then answers as for a holder gone. A registry that cannot be read
// hands the attempt back, later each time.
func (w *Worker) ruleAnswerHolder(d *delivery) step {
	holder, _ := d.task.ToolCallMetadata[tool.AnswerHolderMetaKey].(string)
	if holder == "" || holder == w.cfg.ID {
		return next
	}
	log := d.log.With(slog.String("holder", holder))
	if d.md != nil && d.md.NumDelivered >= w.holderDeliveries(d.tool.Name) {
		log.Warn("answer not taken by the worker that holds its call; run here", slog.Uint64("deliveries", d.md.NumDelivered))
		return next
	}
	ctx, cancel := context.WithTimeout(d.ctx, jsop.Timeout)
	defer cancel()
	alive, err := w.serves(ctx, d.tool.Name, holder)
	if err != nil {
		delay := handBackDelay(d.md)
		log.Warn("registry unavailable; answer handed back", slog.Duration("delay", delay), slog.Any("error", err))
		return d.handBack(delay)
	}
	if !alive {
		log.Warn("the worker that holds the answer's call is gone; run here")
		return next
	}
	log.Debug("answer for the worker that holds its call; handed back")
	delay := holderNakDelay
	if d.md != nil {
		delay = min(time.Duration(d.md.NumDelivered)*holderNakDelay, maxHolderNakDelay) //nolint:gosec // G115: a count of deliveries, far below what would overflow
	}
	if w.nakDelayAdded(d.tool.Name, d.md) > 0 {
		// The server would redeliver it tens of seconds late: wait here
		// (at most maxHolderNakDelay, far within the delivery's backoff),
		// then hand it back for redelivery at once.
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
		}
		return d.handBack(0)
	}
	return d.handBack(delay)
}

// nakDelayAdded returns what the server adds to the delay of a nak of the
// delivery md of toolName's task consumer: nats-server (2.15) sets a
// delayed nak's redelivery at the delay past the ack wait's end, and
// redelivers when the consumer's backoff for the delivery has passed, so
// a backoff entry longer than the ack wait is added to the delay: 20 s at
// the 4th delivery and 50 s from the 5th of the shipped task consumer (ack
// wait 10 s, backoff 10, 10, 10, 30 and 60 s). Zero without a backoff.
func (w *Worker) nakDelayAdded(toolName string, md *jetstream.MsgMetadata) time.Duration {
	p := w.partOf(toolName)
	if p == nil || md == nil || md.NumDelivered == 0 {
		return 0
	}
	cfg := p.consumer.CachedInfo().Config
	if len(cfg.BackOff) == 0 {
		return 0
	}
	// The server's index: the deliveries before this one, at most the last.
	i := min(md.NumDelivered-1, uint64(len(cfg.BackOff)-1)) //nolint:gosec // G115: a slice's length less one, never negative here
	return max(cfg.BackOff[i]-cfg.AckWait, 0)
}

// holderDeliveries is the delivery of an answer's attempt from which a
// worker that is not its holder runs it: maxHolderDeliveries, below the
// tool's delivery limit.
func (w *Worker) holderDeliveries(toolName string) uint64 {
	n := maxHolderDeliveries
	if limit := w.deliveryLimit(toolName); limit > 0 {
		n = min(n, max(limit-2, 1))
	}
	return uint64(n)
}

// serves reports whether the worker of ID id advertises toolName now: its
// registry entry is there, its own and not expired.
func (w *Worker) serves(ctx context.Context, toolName, id string) (bool, error) {
	data, _, err := w.registry.Get(ctx, natsjs.RegistryKey(toolName, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var e natsjs.RegistryEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return false, nil //nolint:nilerr // an entry that does not decode advertises nothing
	}
	return e.Worker == id && time.Now().Before(e.ExpiresAt), nil
}
