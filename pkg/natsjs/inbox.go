package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
)

// InboxConfig configures an [Inbox].
type InboxConfig struct {
	// JetStream is the JetStream context. Required.
	JetStream jetstream.JetStream
	// Prefix is the subject prefix. Defaults to [protocol.DefaultPrefix].
	Prefix string
	// MaxPayload bounds accepted payloads; 0 leaves it to the server.
	MaxPayload int
	// Metrics, if set, counts refused messages.
	Metrics *metrics.Agent
	// Logger receives every refusal. Defaults to discarding them.
	Logger *slog.Logger
}

// Inbox reads what arrived for a paused conversation while no agent ran,
// from the streams themselves: decisions (<prefix>.decision.<conv>.*),
// people's answers to external calls (<prefix>.answer.<conv>.*) and
// workers' results (<prefix>.result.<conv>.*), each read from the
// conversation's checkpoint on. Every message is checked against the
// stored pending record: one that resolves a pending task of the right
// kind for the first time becomes an arrival; the rest is refused, logged
// and counted by reason (malformed, unknown_task, wrong_kind, duplicate).
type Inbox struct {
	cfg   InboxConfig
	log   *slog.Logger
	subj  protocol.Subjects
	names Names
}

// NewInbox returns an inbox.
func NewInbox(cfg InboxConfig) (*Inbox, error) {
	if cfg.JetStream == nil {
		return nil, fmt.Errorf("%w: inbox: no JetStream", ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	if err := protocol.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: inbox: %w", ErrInvalidConfig, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Inbox{cfg: cfg, log: log, subj: protocol.Subjects{Prefix: cfg.Prefix}, names: NamesFor(cfg.Prefix)}, nil
}

// Collect reads the messages stored for st's conversation past its
// checkpoint, appends the new arrivals to st.Arrivals (in stream order per
// kind: decisions, answers, then results) and moves the checkpoint. It returns how
// many arrivals it added. The caller saves st.
func (in *Inbox) Collect(ctx context.Context, st *conversation.State) (int, error) {
	before := len(st.Arrivals)
	var err error
	st.Checkpoint.Decisions, err = in.replay(ctx, in.names.Decisions, in.subj.DecisionsFor(st.ID), st.Checkpoint.Decisions,
		func(task string, data []byte, meta *jetstream.MsgMetadata) {
			in.consider(st, conversation.ArrivalDecision, task, data, meta)
		})
	if err != nil {
		return 0, err
	}
	st.Checkpoint.Answers, err = in.replay(ctx, in.names.Answers, in.subj.AnswersFor(st.ID), st.Checkpoint.Answers,
		func(task string, data []byte, meta *jetstream.MsgMetadata) {
			in.consider(st, conversation.ArrivalAnswer, task, data, meta)
		})
	if err != nil {
		return 0, err
	}
	st.Checkpoint.Results, err = in.replay(ctx, in.names.Results, in.subj.ResultsFor(st.ID), st.Checkpoint.Results,
		func(task string, data []byte, meta *jetstream.MsgMetadata) {
			in.consider(st, conversation.ArrivalResult, task, data, meta)
		})
	if err != nil {
		return 0, err
	}
	return len(st.Arrivals) - before, nil
}

// replay calls fn for every message stored on filter after sequence
// after, in order, and returns the last sequence read.
func (in *Inbox) replay(ctx context.Context, stream, filter string, after uint64, fn func(task string, data []byte, meta *jetstream.MsgMetadata)) (uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := in.cfg.JetStream.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return after, fmt.Errorf("natsjs: read %s: %w", filter, err)
	}
	last := after
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return last, fmt.Errorf("natsjs: read %s: %w", filter, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return last, fmt.Errorf("natsjs: read %s: %w", filter, err)
			}
			last = meta.Sequence.Stream
			_, _, task, _, perr := in.subj.Parse(m.Subject())
			if perr != nil {
				in.refuse(metrics.RefuseMalformed, m.Subject(), "", perr)
				continue
			}
			fn(task, m.Data(), meta)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return last, fmt.Errorf("natsjs: read %s: %w", filter, err)
		}
		if n == 0 {
			return last, nil
		}
	}
}

// kindFor says which pending kinds an arrival of kind k may resolve.
func kindFor(k conversation.ArrivalKind, pending deferred.Kind) bool {
	switch k {
	case conversation.ArrivalDecision:
		return pending == deferred.KindApproval
	case conversation.ArrivalAnswer:
		return pending == deferred.KindExternal
	case conversation.ArrivalResult:
		return pending == agent.KindBackground || pending == deferred.KindExternal
	}
	return false
}

// consider checks one message and records it as an arrival or refuses it.
func (in *Inbox) consider(st *conversation.State, kind conversation.ArrivalKind, task string, data []byte, meta *jetstream.MsgMetadata) {
	subject := string(kind) + " for " + st.ID + "." + task
	opts := &protocol.DecodeOpts{MaxSize: in.cfg.MaxPayload}
	if opts.MaxSize == 0 {
		opts.MaxSize = -1
	}
	var err error
	switch kind {
	case conversation.ArrivalDecision:
		_, err = protocol.DecodeDecision(data, opts)
	case conversation.ArrivalAnswer:
		var res protocol.Result
		res, err = protocol.DecodeResult(data, task, opts)
		if err == nil && res.Status != protocol.StatusOK && res.Status != protocol.StatusRetry && res.Status != protocol.StatusFailed {
			err = fmt.Errorf("an answer's status is ok, retry or failed, not %s", res.Status)
		}
	default:
		var res protocol.Result
		res, err = protocol.DecodeResult(data, task, opts)
		if err == nil && !final(res.Status) {
			err = fmt.Errorf("status %s is not a final result", res.Status)
		}
	}
	if err != nil {
		reason := metrics.RefuseMalformed
		if errors.Is(err, protocol.ErrTooLarge) {
			reason = metrics.RefuseOversize
		}
		in.refuse(reason, subject, task, err)
		return
	}
	pt, ok := st.PendingTask(task)
	switch {
	case !ok && st.Arrived(task):
		in.refuse(metrics.RefuseDuplicate, subject, task, errors.New("the task was already resolved"))
	case !ok:
		in.refuse(metrics.RefuseUnknownTask, subject, task, errors.New("no pending call of this conversation has this task ID"))
	case !kindFor(kind, pt.Kind):
		in.refuse(metrics.RefuseWrongKind, subject, task, fmt.Errorf("the task is a pending %s call", pt.Kind))
	case st.Arrived(task):
		in.refuse(metrics.RefuseDuplicate, subject, task, errors.New("the task already has its answer (first wins)"))
	default:
		st.Arrivals = append(st.Arrivals, conversation.Arrival{TaskID: task, Kind: kind, Data: append([]byte(nil), data...), Seq: meta.Sequence.Stream, At: meta.Timestamp.UTC()})
	}
}

// final reports whether a worker's result ends its task.
func final(s protocol.Status) bool {
	return s != protocol.StatusApprovalRequired && s != protocol.StatusCallDeferred
}

func (in *Inbox) refuse(reason metrics.RefuseReason, subject, task string, err error) {
	if in.cfg.Metrics != nil {
		in.cfg.Metrics.Refused(reason)
	}
	in.log.Warn("message refused", slog.String("reason", string(reason)), slog.String("subject", subject),
		slog.String("task_id", task), slog.Any("error", err))
}
