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
	batches    *direct.Batches // the index's pages (pindex.go)
}

// OpenPending ensures the pending bucket's stream and the index of
// pending calls (as natsjs.Provision does, when the user may; else they
// must exist) and binds them.
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
	if err := natsjs.EnsureStreams(ctx, js, cfg.Provision, names.PendingIndex); err != nil {
		return nil, err
	}
	p := &Pending{kv: kv, nc: js.Conn(), subj: protocol.Subjects{Prefix: names.Prefix}, names: names,
		Announcer: NewAnnouncer(js, names.Prefix), Publisher: NewPublisher(js, names.Prefix), batches: direct.NewBatches(js.Conn())}
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
	return decodeRecord(id, e.Value())
}

// decodeRecord decodes data, the pending record of conversation id.
func decodeRecord(id string, data []byte) (*conversation.Summary, error) {
	var s conversation.Summary
	if err := json.Unmarshal(data, &s); err != nil {
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
// record for which nothing its run will admit is stored yet (a record is
// as old as the last save: what people published since is looked up; a
// message the run refuses, malformed or stale, answers nothing and hides
// no call: SPEC §21), in the record's order. Background tasks are listed
// as they are.
func (p *Pending) Waiting(ctx context.Context, s *conversation.Summary) ([]deferred.PendingTask, error) {
	var out []deferred.PendingTask
	st := s.State()
	for _, t := range s.Tasks {
		// A call that needs a quorum waits until the run has applied its
		// decisions: one approval stored is not its end.
		if t.Kind != deferred.KindBackground && t.Required <= 1 {
			_, answered, err := p.stored(ctx, st, t.Kind, t.TaskID)
			if err != nil {
				return nil, err
			}
			if answered {
				continue
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// LiveWaiting returns the approvals a live run of conversation conv
// waits for (agent --approve wait: announced, not resolved, no pending
// record holds them yet) for which nothing the run will admit is stored
// yet, skipping the tasks of skip (the stored pending record's calls),
// in the order of their task IDs (their time). Best effort: a role that
// cannot read the approvals stream (only admin and approver can) sees
// none.
func (p *Pending) LiveWaiting(ctx context.Context, conv string, skip map[string]bool) []deferred.PendingTask {
	var out []deferred.PendingTask
	for _, ap := range p.Announcer.open(ctx, conv) {
		if skip[ap.TaskID] {
			continue
		}
		t := liveTask(ap)
		st := &conversation.State{ID: conv, Pending: &deferred.PendingRecord{ConversationID: conv, Tasks: []deferred.PendingTask{t}}}
		if _, answered, err := p.stored(ctx, st, t.Kind, t.TaskID); err == nil && answered {
			continue // decided; the run has not read it yet
		}
		out = append(out, t)
	}
	return out
}

// liveTask is the pending approval a live run announced with ap.
func liveTask(ap protocol.Approval) deferred.PendingTask {
	return deferred.PendingTask{TaskID: ap.TaskID, ToolCallID: ap.ToolCallID, Kind: deferred.KindApproval,
		Tool: ap.Tool, Args: ap.Args, Metadata: ap.Metadata}
}

// pendingState is the state a decision or an answer for task of
// conversation conv is checked against: s's (its pending record, nil
// when it has none), with the approval a live run announced for task
// when the record does not hold it (agent --approve wait reads
// decisions live).
func (p *Pending) pendingState(ctx context.Context, conv string, s *conversation.Summary, kind conversation.ArrivalKind, task string) *conversation.State {
	st := &conversation.State{ID: conv, Pending: &deferred.PendingRecord{ConversationID: conv}}
	if s != nil {
		st = s.State()
	}
	if _, ok := st.PendingTask(task); ok || kind != conversation.ArrivalDecision {
		return st
	}
	if ap, ok := p.Announcer.Announced(ctx, conv, task); ok {
		st.Pending.Tasks = append(st.Pending.Tasks, liveTask(ap))
	}
	return st
}

// Publish checks data, a decision or an answer for task of conversation
// conv given by hand, against s, its pending record (nil when it has
// none), as the run that reads it will (conversation.State.Admit; a
// decision for an approval a live run awaits, see [Announcer.Awaits],
// passes too), and publishes it, first wins: one published when a
// decision or an answer the run will admit is already stored for the
// task is refused, as the run would refuse it (a
// *conversation.RefusedError, reason duplicate; so is one for a task the
// record no longer holds with such a message stored: the task was
// resolved, SPEC §11's 409). A message stored that the run refuses
// (malformed, stale, a forged timeout) keeps no one from deciding: this
// one is published after it. A stale record (the run has resolved the
// task since its last save) is harmless: the run refuses what no longer
// resolves a pending task. It returns the subject.
func (p *Pending) Publish(ctx context.Context, conv string, s *conversation.Summary, kind conversation.ArrivalKind, task string, data []byte) (string, error) {
	st := p.pendingState(ctx, conv, s, kind, task)
	// A decision published here is signed with the service's key, if
	// any: its by and channel are then verified, and its by a quorum's
	// identity (SPEC §12).
	var d protocol.Decision
	var sig string
	o := conversation.AdmitOptions{}
	switch kind {
	case conversation.ArrivalDecision:
		_ = json.Unmarshal(data, &d) // a malformed one is refused below
		sig = p.Identities.Sign(conv, task, data)
		o = p.Identities.admitOptions(kind, conv, task, data, nats.Header{SignatureHeader: []string{sig}})
	case conversation.ArrivalAnswer:
		// An answer too: its by and channel are then verified (SPEC §21).
		sig = p.Identities.SignAnswer(conv, task, data)
	}
	o.At, o.MaxSize = time.Now(), p.maxPayload
	if err := st.AdmitWith(kind, task, data, o); err != nil {
		var re *conversation.RefusedError
		if errors.As(err, &re) && re.Reason == conversation.ReasonUnknownTask && p.resolved(ctx, conv, deferredKind(kind), task) {
			err = &conversation.RefusedError{Reason: conversation.ReasonDuplicate, TaskID: task, Err: errors.New("the task was already resolved")}
		}
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
		if last, answered, serr := p.stored(ctx, st, deferredKind(kind), task); serr == nil && !answered && last != nil {
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

// subjectOf returns the stream and subject of the decisions (approval)
// or the answers (external call) of task of conversation conv.
func (p *Pending) subjectOf(kind deferred.Kind, conv, task string) (stream, subject string) {
	if kind == deferred.KindExternal {
		return p.names.Answers, p.subj.Answer(conv, task)
	}
	return p.names.Decisions, p.subj.Decision(conv, task)
}

// stored is what counts as stored for task of kind, pending in st (SPEC
// §21): it returns the last message stored on the task's subject (a
// decision for an approval, an answer for an external call; nil when
// none), and whether it answers the task: whether the run that reads it
// will admit it against st (decoded, of the right kind, bound to the
// arguments as pending, a timeout's only as the call's own). A message
// the run refuses answers nothing: the call stays pending and decidable.
// A task st does not hold is answered by any message (a record of a
// conversation that went on). It is read by a direct get of the
// subject, which the people roles may do.
func (p *Pending) stored(ctx context.Context, st *conversation.State, kind deferred.Kind, task string) (*direct.Msg, bool, error) {
	stream, subject := p.subjectOf(kind, st.ID, task)
	m, err := direct.Last(ctx, p.nc, stream, subject)
	if err != nil || m == nil {
		return m, false, err
	}
	if _, ok := st.PendingTask(task); !ok {
		return m, true, nil
	}
	ak := conversation.ArrivalAnswer
	if kind == deferred.KindApproval {
		ak = conversation.ArrivalDecision
	}
	o := p.Identities.admitOptions(ak, st.ID, task, m.Data, m.Header)
	o.At, o.MaxSize = m.Stored, p.maxPayload
	check := &conversation.State{ID: st.ID, Pending: st.Pending, UpdatedAt: st.UpdatedAt, Votes: slices.Clone(st.Votes)}
	return m, check.AdmitWith(ak, task, m.Data, o) == nil, nil
}

// resolved reports whether task of kind, which conversation conv's
// pending record does not hold, was resolved: a well-formed decision or
// answer is stored for it (the run admitted it and went on). A task
// with none stored, or only malformed ones, is unknown.
func (p *Pending) resolved(ctx context.Context, conv string, kind deferred.Kind, task string) bool {
	stream, subject := p.subjectOf(kind, conv, task)
	m, err := direct.Last(ctx, p.nc, stream, subject)
	if err != nil || m == nil {
		return false
	}
	if kind == deferred.KindExternal {
		_, err = protocol.DecodeResult(m.Data, task, nil)
	} else {
		_, err = protocol.DecodeDecision(m.Data, nil)
	}
	return err == nil
}
