package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/pending"
)

// The guard of the scheduled timeouts (SPEC §12, issue 37). The expiries
// stream must allow roll-up headers (the server's message schedules need
// them), and the roles that schedule timeouts (agent, serve) may publish
// on it: one message with `Nats-Rollup: all` wipes every scheduled
// timeout, and the calls would wait for a person forever. So each replica
// watches the stream's messages, headers only, from the time it starts;
// at a roll-up of the whole stream (the server's own writes roll only
// their subject up) it schedules again, from the pending records (each
// approval saved with the timeout its policy set), the timeout of every
// call still waiting: one past its time is decided at once, as the
// timers of a server without schedules decide it; the others get their
// schedule back, the roll-up's sequence in its Nats-Msg-Id so that the
// replicas doing it at once store it once. A forged timeout among them
// is the reader's to refuse (conversation.State.Admit checks a timeout's
// decision against the call's policy and time).

// rollupHeader is the header of a roll-up.
const rollupHeader = jetstream.MsgRollup

// guardSchedules starts watching the expiries stream for roll-ups; stop
// ends the watch and waits for a pass under way.
func (s *Service) guardSchedules(ctx context.Context) (stop func(), err error) {
	names := natsjs.NamesFor(s.cfg.Provision.Prefix)
	c, err := s.cfg.JetStream.OrderedConsumer(ctx, names.Expiries, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{names.Prefix + ".expiry.>"}, DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true})
	if err != nil {
		return nil, fmt.Errorf("serve: watch the expiries stream: %w", err)
	}
	rollups := make(chan uint64, 1)
	cc, err := c.Consume(func(m jetstream.Msg) {
		// The server's own writes roll their subject up (sub): a fired
		// schedule replaces what its target held. A roll-up of the whole
		// stream is no one's to make.
		if m.Headers().Get(rollupHeader) != jetstream.MsgRollupAll {
			return
		}
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		select {
		case rollups <- meta.Sequence.Stream:
		default: // a pass is due already: it reads every record
		}
	})
	if err != nil {
		return nil, fmt.Errorf("serve: watch the expiries stream: %w", err)
	}
	done := make(chan struct{})
	passes := make(chan struct{})
	go func() {
		defer close(passes)
		for {
			select {
			case <-done:
				return
			case seq := <-rollups:
				s.log.Warn("approval timeouts: the expiries stream was rolled up; scheduling the timeouts of the calls that wait again",
					slog.Uint64("rollup_seq", seq))
				pctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := s.reschedule(pctx, seq, time.Now()); err != nil {
					s.log.Error("approval timeouts: not all scheduled again", slog.Any("error", err))
				}
				cancel()
			}
		}
	}()
	return func() {
		cc.Stop()
		<-cc.Closed()
		close(done)
		<-passes
	}, nil
}

// reschedule schedules again the timeout of every approval that waits
// with one (as its record saved it), generation gen (the roll-up's
// sequence): the decision published first-wins when it is due at now, its
// schedule made again otherwise.
func (s *Service) reschedule(ctx context.Context, gen uint64, now time.Time) error {
	calls, err := s.records.Calls(ctx, pending.Filter{Kinds: []deferred.Kind{deferred.KindApproval}})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range calls {
		at := c.Requested()
		if c.Expiry == nil || at.IsZero() {
			continue
		}
		d := conversation.TimeoutDecision(*c.Expiry)
		due := at.Add(c.Expiry.After)
		if now.Before(due) {
			errs = append(errs, s.cfg.Records.Announcer.ExpireAgain(ctx, c.ConversationID, c.TaskID, due, d, gen))
			continue
		}
		if now.Before(due.Add(timerSkew)) {
			// Its reader admits it stored at or after the due time by the
			// server's clock: scheduled, not written now.
			errs = append(errs, s.cfg.Records.Announcer.ExpireAgain(ctx, c.ConversationID, c.TaskID, due.Add(timerSkew), d, gen))
			continue
		}
		data, err := json.Marshal(d)
		if err != nil {
			return err
		}
		if _, err := s.cfg.Records.Publisher.PublishFirst(ctx, conversation.ArrivalDecision, c.ConversationID, c.TaskID, data); err != nil &&
			!errors.Is(err, natsjs.ErrAlreadyAnswered) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
