package convstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Pending is what people and UIs use of the stored conversations
// (`agent pending`, `agent approve|deny|answer`): the pending records of
// the bucket <prefix>_pending ([conversation.Summary], written by the
// [Store] with every save), never a conversation's state or history, and
// the decisions and answers they publish. It needs only what the
// approver and answerer roles of deploy/nats/auth.conf are granted: the
// pending bucket read-only, direct gets of the decisions and answers
// stored for a task, the approvals stream (the approver), and publishing.
type Pending struct {
	kv    jetstream.KeyValue
	nc    *nats.Conn
	subj  protocol.Subjects
	names natsjs.Names
	// Announcer reads the approvals a live run waits for.
	Announcer *Announcer
	// Publisher publishes decisions and answers.
	Publisher *Publisher
	// Identities authenticates the approvals of calls that need a quorum
	// as the inbox does (InboxConfig.Identities) and signs those Publish
	// publishes with its key; nil authenticates none.
	Identities *Identities
	maxPayload int
}

// OpenPending ensures the pending bucket's stream (as natsjs.Provision
// does, when the user may; else it must exist) and binds it.
func OpenPending(ctx context.Context, cfg OpenConfig) (*Pending, error) {
	js := cfg.JetStream
	if js == nil {
		return nil, fmt.Errorf("%w: pending records: no JetStream", natsjs.ErrInvalidConfig)
	}
	names := natsjs.NamesFor(cfg.Provision.Prefix)
	kv, err := natsjs.EnsureBucket(ctx, js, cfg.Provision, names.PendingStream, names.PendingBucket)
	if err != nil {
		return nil, err
	}
	p := &Pending{kv: kv, nc: js.Conn(), subj: protocol.Subjects{Prefix: names.Prefix}, names: names,
		Announcer: NewAnnouncer(js, names.Prefix), Publisher: NewPublisher(js, names.Prefix)}
	if p.nc != nil {
		p.maxPayload = int(p.nc.MaxPayload())
	}
	return p, nil
}

// Get returns the pending record of conversation id: an error wrapping
// conversation.ErrNotFound when there is none (the conversation is
// unknown, or waits for nothing since its last save).
func (p *Pending) Get(ctx context.Context, id string) (*conversation.Summary, error) {
	if err := checkConvID(id); err != nil {
		return nil, err
	}
	e, err := p.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: no pending record of %s", conversation.ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
	}
	var s conversation.Summary
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, fmt.Errorf("natsjs: pending record of %s: %w", id, err)
	}
	if s.ConversationID != id {
		return nil, fmt.Errorf("natsjs: pending record of %s names conversation %q", id, s.ConversationID)
	}
	return &s, nil
}

// List returns the conversations with a pending record, sorted.
func (p *Pending) List(ctx context.Context) ([]string, error) {
	l, err := p.kv.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("natsjs: list pending records: %w", err)
	}
	var ids []string
	for k := range l.Keys() {
		ids = append(ids, k)
	}
	slices.Sort(ids)
	return ids, nil
}

// Waiting returns what s's conversation waits for: the tasks of its
// record for which no decision or answer is stored yet (a record is as
// old as the last save: what people published since is looked up), in
// the record's order. Background tasks are listed as they are.
func (p *Pending) Waiting(ctx context.Context, s *conversation.Summary) ([]deferred.PendingTask, error) {
	var out []deferred.PendingTask
	for _, t := range s.Tasks {
		var stream, subject string
		switch t.Kind {
		case deferred.KindApproval:
			stream, subject = p.names.Decisions, p.subj.Decision(s.ConversationID, t.TaskID)
		case deferred.KindExternal:
			stream, subject = p.names.Answers, p.subj.Answer(s.ConversationID, t.TaskID)
		}
		// A call that needs a quorum waits until the run has applied its
		// decisions: one approval stored is not its end.
		if stream != "" && t.Required <= 1 {
			_, settled, err := p.settled(ctx, s.ConversationID, s, t.Kind, t.TaskID, stream, subject)
			if err != nil {
				return nil, err
			}
			if settled {
				continue
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// Publish checks data, a decision or an answer for task of conversation
// conv given by hand, against s, its pending record (nil when it has
// none), as the run that reads it will (conversation.State.Admit; a
// decision for an approval a live run awaits, see [Announcer.Awaits],
// passes too), and publishes it, first wins: one published when a
// decision or an answer is already stored for the task is refused, as
// the run would refuse it (a *conversation.RefusedError, reason
// duplicate). A stale record (the run has resolved the task since its
// last save) is harmless: the run refuses what no longer resolves a
// pending task. It returns the subject.
func (p *Pending) Publish(ctx context.Context, conv string, s *conversation.Summary, kind conversation.ArrivalKind, task string, data []byte) (string, error) {
	st := &conversation.State{ID: conv}
	if s != nil {
		st = s.State()
	}
	// A decision published here is signed with the service's key, if
	// any: its by and channel are then verified, and its by a quorum's
	// identity (SPEC §12).
	var d protocol.Decision
	var sig string
	o := conversation.AdmitOptions{}
	if kind == conversation.ArrivalDecision {
		_ = json.Unmarshal(data, &d) // a malformed one is refused below
		sig = p.Identities.Sign(conv, task, data)
		o = p.Identities.admitOptions(conv, task, data, nats.Header{SignatureHeader: []string{sig}})
	}
	o.At, o.MaxSize = time.Now(), p.maxPayload
	err := st.AdmitWith(kind, task, data, o)
	var re *conversation.RefusedError
	if errors.As(err, &re) && re.Reason == conversation.ReasonUnknownTask && kind == conversation.ArrivalDecision && p.Announcer.Awaits(ctx, conv, task) {
		err = nil // a run with --approve wait announced it and reads decisions live
	}
	if err != nil {
		return "", err
	}
	if pt, ok := st.PendingTask(task); ok && pt.Required > 1 && kind == conversation.ArrivalDecision {
		// A decision of a call that needs a quorum: published beside the
		// approvals stored, once per identity (a denial once), with its
		// signature.
		key := "denied"
		if d.Approved {
			key = p.Identities.VoteKey(conv, task, d.By)
		}
		return p.Publisher.PublishVote(ctx, conv, task, key, data, sig)
	}
	subject, err := p.Publisher.PublishFirstSigned(ctx, kind, conv, task, data, sig)
	if errors.Is(err, natsjs.ErrAlreadyAnswered) {
		// What is stored wins only if the run will admit it: one it
		// refuses (a forged timeout, a malformed one) keeps no one from
		// deciding after it.
		stream := p.names.Decisions
		if kind == conversation.ArrivalAnswer {
			stream = p.names.Answers
		}
		if last, settled, serr := p.settled(ctx, conv, s, deferredKind(kind), task, stream, subject); serr == nil && !settled && last != nil {
			subject, err = p.Publisher.publishAfter(ctx, kind, conv, task, data, sig, last.Seq)
		}
	}
	if errors.Is(err, natsjs.ErrAlreadyAnswered) {
		return subject, &conversation.RefusedError{Reason: conversation.ReasonDuplicate, TaskID: task, Err: err}
	}
	return subject, err
}

// deferredKind is the kind of pending call an arrival of kind k resolves.
func deferredKind(k conversation.ArrivalKind) deferred.Kind {
	if k == conversation.ArrivalAnswer {
		return deferred.KindExternal
	}
	return deferred.KindApproval
}

// settled returns the last message stored on subject of stream for task
// (of kind) of conversation conv, and whether it settles the task: the
// run will admit it against s, conv's pending record (a task the record
// does not hold, a live run's approval, is settled by any message). It
// is read by a direct get of the subject, which the people roles may do.
func (p *Pending) settled(ctx context.Context, conv string, s *conversation.Summary, kind deferred.Kind, task, stream, subject string) (*direct.Msg, bool, error) {
	m, err := direct.Last(ctx, p.nc, stream, subject)
	if err != nil || m == nil {
		return m, false, err
	}
	st := &conversation.State{ID: conv}
	if s != nil {
		st = s.State()
	}
	if _, ok := st.PendingTask(task); !ok {
		return m, true, nil
	}
	ak := conversation.ArrivalAnswer
	o := conversation.AdmitOptions{}
	if kind == deferred.KindApproval {
		ak, o = conversation.ArrivalDecision, p.Identities.admitOptions(conv, task, m.Data, m.Header)
	}
	o.At, o.MaxSize = m.Stored, p.maxPayload
	return m, st.AdmitWith(ak, task, m.Data, o) == nil, nil
}
