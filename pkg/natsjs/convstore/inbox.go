package convstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
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
	// QuietDuplicates logs the refusals of duplicates at Info rather than
	// Warn: a second copy of a decision or a result is at-least-once
	// delivery at work (the first one won, and the refusal is counted),
	// not something a user must act on. Other refusals stay warnings.
	QuietDuplicates bool
	// Identities authenticates the approvals of calls that need a quorum
	// (SPEC §12; conversation.AdmitOptions.Identify): nil authenticates
	// none, so that such a call's approvals are refused (unauthenticated).
	Identities *Identities
}

// Inbox reads what arrived for a paused conversation while no agent ran,
// from the streams themselves: decisions (<prefix>.decision.<conv>.*),
// people's answers to external calls (<prefix>.answer.<conv>.*) and
// workers' results (<prefix>.result.<conv>.>), each read from the
// conversation's checkpoint on. Every message is checked against the
// stored pending record: one that resolves a pending task of the right
// kind for the first time becomes an arrival; the rest is refused, logged
// and counted by reason (malformed, unknown_task, wrong_kind, wrong_tool, wrong_attempt,
// duplicate). It reads by batches of direct gets, whose replies come on one
// subscription of its connection's inbox prefix, made at its first read
// and kept as long as the connection: make one Inbox per connection, not
// one per read.
type Inbox struct {
	cfg   InboxConfig
	get   func(ctx context.Context, nc *nats.Conn, stream, subject string) (*direct.Msg, error)
	batch func(ctx context.Context, stream, filter string, from uint64, n int) ([]*direct.Msg, bool, error)
	// batchSize is how many messages a read asks for (direct.BatchSize).
	batchSize int
	log       *slog.Logger
	subj      protocol.Subjects
	names     natsjs.Names
}

// NewInbox returns an inbox.
func NewInbox(cfg InboxConfig) (*Inbox, error) {
	if cfg.JetStream == nil {
		return nil, fmt.Errorf("%w: inbox: no JetStream", natsjs.ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	if err := protocol.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: inbox: %w", natsjs.ErrInvalidConfig, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Inbox{cfg: cfg, get: direct.Last, batch: direct.NewBatches(cfg.JetStream.Conn()).Next, batchSize: direct.BatchSize, log: log, subj: protocol.Subjects{Prefix: cfg.Prefix}, names: natsjs.NamesFor(cfg.Prefix)}, nil
}

// Collect reads the messages stored for st's conversation past its
// checkpoint, appends the new arrivals to st.Arrivals (in stream order per
// kind: decisions, answers, then results) and moves the checkpoint. It returns how
// many arrivals it added. The caller saves st.
func (in *Inbox) Collect(ctx context.Context, st *conversation.State) (int, error) {
	before := len(st.Arrivals)
	// The three streams are read at once (readahead.go), their messages
	// considered in order.
	ctx, cancel := context.WithCancel(ctx)
	answers := in.readAhead(ctx, in.names.Answers, in.subj.AnswersFor(st.ID), st.Checkpoint.Answers)
	results := in.readAhead(ctx, in.names.Results, in.subj.ResultsFor(st.ID), st.Checkpoint.Results)
	defer results.drain()
	defer answers.drain()
	defer cancel()
	if _, err := in.CollectDecisions(ctx, st); err != nil {
		return 0, err
	}
	var err error
	st.Checkpoint.Answers, err = answers.each(func(task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header) {
		in.consider(st, conversation.ArrivalAnswer, task, toolName, data, meta, h)
	})
	if err != nil {
		return 0, err
	}
	st.Checkpoint.Results, err = results.each(func(task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header) {
		in.consider(st, conversation.ArrivalResult, task, toolName, data, meta, h)
	})
	if err != nil {
		return 0, err
	}
	return len(st.Arrivals) - before, nil
}

// CollectDecisions is [Inbox.Collect] for the decisions stream alone: it
// appends the new decisions to st.Arrivals and moves the decisions'
// checkpoint. --approve wait polls with it while a step waits.
func (in *Inbox) CollectDecisions(ctx context.Context, st *conversation.State) (int, error) {
	before := len(st.Arrivals)
	var err error
	st.Checkpoint.Decisions, err = in.replay(ctx, in.names.Decisions, in.subj.DecisionsFor(st.ID), st.Checkpoint.Decisions,
		func(task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header) {
			in.consider(st, conversation.ArrivalDecision, task, toolName, data, meta, h)
		})
	return len(st.Arrivals) - before, err
}

// CollectAnswers is [Inbox.Collect] for the answers stream alone: it
// appends the new answers to st.Arrivals and moves the answers'
// checkpoint (the live wait of non-blocking external calls).
func (in *Inbox) CollectAnswers(ctx context.Context, st *conversation.State) (int, error) {
	before := len(st.Arrivals)
	var err error
	st.Checkpoint.Answers, err = in.replay(ctx, in.names.Answers, in.subj.AnswersFor(st.ID), st.Checkpoint.Answers,
		func(task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header) {
			in.consider(st, conversation.ArrivalAnswer, task, toolName, data, meta, h)
		})
	return len(st.Arrivals) - before, err
}

// replay calls fn for every message stored on filter after sequence
// after, in order, and returns the last sequence read. A read that fails
// because no server answered for a moment (a cluster electing a leader)
// goes on from the last message read, so each message is passed to fn
// once.
func (in *Inbox) replay(ctx context.Context, stream, filter string, after uint64, fn func(task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header)) (uint64, error) {
	last := after
	_, err := jsop.Retry(ctx, in.log, "inbox", func(ctx context.Context) error {
		var err error
		last, err = in.replayOnce(ctx, stream, filter, last, fn)
		return err
	})
	if err != nil {
		return last, fmt.Errorf("natsjs: read %s: %w", filter, err)
	}
	return last, nil
}

// replayOnce is one attempt of replay, by batches of direct gets of the
// next messages on filter (no consumer created: a wake of `agent serve`
// reads a conversation's arrivals at the cost of a request per batch,
// however many conversations wake at once). The messages of a batch cut
// short by an error are passed on before it is returned.
func (in *Inbox) replayOnce(ctx context.Context, stream, filter string, after uint64, fn func(task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header)) (uint64, error) {
	last := after
	for {
		msgs, more, err := in.batch(ctx, stream, filter, last+1, in.batchSize)
		for _, m := range msgs {
			last = m.Seq
			_, _, task, toolName, perr := in.subj.Parse(m.Subject)
			if perr != nil {
				in.refuse(metrics.RefuseMalformed, m.Subject, "", perr)
				continue
			}
			meta := &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.Seq}, Timestamp: m.Stored, Stream: stream}
			fn(task, toolName, m.Data, meta, m.Header)
		}
		if err != nil || !more || len(msgs) == 0 {
			return last, err
		}
	}
}

// final reports whether a worker's result ends its task.
func final(s protocol.Status) bool {
	return s != protocol.StatusApprovalRequired && s != protocol.StatusCallDeferred
}

// consider checks one message (on a subject naming toolName: results
// alone name one) and records it as an arrival or refuses it. A result
// whose subject names another tool than the pending task's is refused
// (wrong_tool): only the workers of a task's tool may answer it (SPEC §9).
// A worker's result for a task this conversation never had pending is
// skipped quietly: the results stream also holds the results of every
// inline call, which the run that made them consumed live; so are a
// worker's deferral and the first result of a task settled live.
func (in *Inbox) consider(st *conversation.State, kind conversation.ArrivalKind, task, toolName string, data []byte, meta *jetstream.MsgMetadata, h nats.Header) {
	if kind == conversation.ArrivalResult {
		pt, pending := st.PendingTask(task)
		if pending && pt.Tool != toolName {
			in.refuse(metrics.RefuseWrongTool, string(kind)+" for "+st.ID+"."+task, task, fmt.Errorf("task is a call of %s, not %s", pt.Tool, toolName))
			return
		}
		var head struct {
			Status  protocol.Status `json:"status"`
			Attempt int             `json:"attempt"`
		}
		decoded := json.Unmarshal(data, &head) == nil
		deferral := decoded && !final(head.Status)
		// A worker's deferral (approval_required, call_deferred) is how
		// the call became pending, not its answer; the first result of a
		// task settled live is the one its run consumed.
		if deferral || (!pending && !st.Arrived(task)) || (!pending && st.TakeSettledLive(task)) {
			in.log.Debug("result skipped", slog.String("conversation_id", st.ID), slog.String("task_id", task), slog.String("status", string(head.Status)))
			return
		}
		// A result of another dispatch of the task (an earlier attempt's,
		// stored again) is not this dispatch's answer.
		if pending && decoded && head.Attempt != pt.Attempt {
			in.refuse(metrics.RefuseWrongAttempt, string(kind)+" for "+st.ID+"."+task, task, fmt.Errorf("result of attempt %d, the task waits for attempt %d", head.Attempt, pt.Attempt))
			return
		}
	}
	o := conversation.AdmitOptions{}
	if kind == conversation.ArrivalDecision || kind == conversation.ArrivalAnswer {
		o = in.cfg.Identities.admitOptions(kind, st.ID, task, data, h)
	}
	o.Seq, o.At, o.MaxSize = meta.Sequence.Stream, meta.Timestamp, in.cfg.MaxPayload
	err := st.AdmitWith(kind, task, data, o)
	if n := len(st.Arrivals); err == nil && n > 0 && st.Arrivals[n-1].Seq == meta.Sequence.Stream {
		// The message's trace context, when it carried one.
		st.Arrivals[n-1].Trace = telemetry.Traceparent(telemetry.SpanContextOf(h))
	}
	var re *conversation.RefusedError
	if errors.As(err, &re) {
		in.refuse(metrics.RefuseReason(re.Reason), string(kind)+" for "+st.ID+"."+task, task, re.Err)
	}
}

func (in *Inbox) refuse(reason metrics.RefuseReason, subject, task string, err error) {
	if in.cfg.Metrics != nil {
		in.cfg.Metrics.Refused(reason)
	}
	level := slog.LevelWarn
	if in.cfg.QuietDuplicates && reason == metrics.RefuseDuplicate {
		level = slog.LevelInfo
	}
	in.log.Log(context.Background(), level, "message refused", slog.String("reason", string(reason)), slog.String("subject", subject),
		slog.String("task_id", task), slog.Any("error", err))
}

// ensureInboxStreams ensures the streams an Inbox reads and an
// [Announcer] writes (approvals, expiries, decisions, answers, results), from the
// definitions, as [natsjs.Provision] does: created when missing and allowed,
// else an error naming them.
func ensureInboxStreams(ctx context.Context, js jetstream.JetStream, opts natsjs.ProvisionOptions) error {
	n := natsjs.NamesFor(opts.Prefix)
	return natsjs.EnsureStreams(ctx, js, opts, n.Approvals, n.Expiries, n.Decisions, n.Answers, n.Results)
}
