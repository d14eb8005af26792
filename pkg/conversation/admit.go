package conversation

import (
	"errors"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// Reasons a message is refused: the reason label of
// offload_refused_messages_total (SPEC §7).
const (
	ReasonUnknownTask = "unknown_task"
	ReasonDuplicate   = "duplicate"
	ReasonMalformed   = "malformed"
	ReasonWrongKind   = "wrong_kind"
	ReasonOversize    = "oversize"
	// ReasonStale: a decision's args_digest is not that of the call's
	// arguments as it is pending (SPEC §12, binding).
	ReasonStale = "stale"
	// ReasonDuplicateIdentity: a second approval by the same identity of a
	// call that needs a quorum (SPEC §12).
	ReasonDuplicateIdentity = "duplicate_identity"
	// ReasonUnauthenticated: an approval of a call that needs a quorum
	// whose identity is not authenticated (SPEC §12: a decision's by
	// counts only when the deployment trusts it).
	ReasonUnauthenticated = "unauthenticated"
	// ReasonInvalidTimeout: a timeout's decision (by "timeout", reason
	// expired, or written by the expiries stream) that is not the call's
	// timeout as its approval policy sets it, or stored before it (SPEC
	// §12): the call stays pending.
	ReasonInvalidTimeout = "invalid_timeout"
)

// RefusedError says why a message for a conversation was refused.
type RefusedError struct {
	// Reason is one of the ReasonXxx labels.
	Reason string
	// TaskID is the task the message named.
	TaskID string
	// Err describes the refusal.
	Err error
}

// Error implements error.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused (%s) for task %s: %v", e.Reason, e.TaskID, e.Err)
}

// Unwrap returns the cause.
func (e *RefusedError) Unwrap() error { return e.Err }

// Accepts reports whether an arrival of kind k may resolve a pending task
// of kind pending: decisions resolve approvals, answers external calls,
// and workers' results background tasks. Only an answer settles an
// external call: it waits for a person (or whoever the agent's operator
// lets publish answers), and a worker's result for it, whoever published
// it, is refused (wrong_kind).
func Accepts(k ArrivalKind, pending deferred.Kind) bool {
	switch k {
	case ArrivalDecision:
		return pending == deferred.KindApproval
	case ArrivalAnswer:
		return pending == deferred.KindExternal
	case ArrivalResult:
		return pending == deferred.KindBackground
	}
	return false
}

// Admit checks a message (a Decision, an Answer or a worker's Result of
// SPEC §5.2, as data) against the pending record and, when it resolves a
// pending task of the right kind for the first time, appends it to
// s.Arrivals. Otherwise it returns a *RefusedError and changes nothing.
// maxSize bounds the payload (≤ 0: no bound). seq and at are the
// message's stream sequence and time (0 and now for a message given on a
// command line).
func (s *State) Admit(kind ArrivalKind, task string, data []byte, seq uint64, at time.Time, maxSize int) error {
	return s.AdmitWith(kind, task, data, AdmitOptions{Seq: seq, At: at, MaxSize: maxSize})
}

// AdmitOptions are the message's place and the rules of [State.AdmitWith].
type AdmitOptions struct {
	// Seq and At are the message's stream sequence and time (0 and now
	// for a message given on a command line).
	Seq uint64
	At  time.Time
	// MaxSize bounds the payload (≤ 0: no bound).
	MaxSize int
	// Identify returns the authenticated identity of an approval, false
	// when it has none; nil authenticates none. Only the approvals of
	// calls that need a quorum ask it (see [State.AdmitWith]).
	Identify func(d protocol.Decision) (string, bool)
	// Signed says a decision or an answer carries the service's valid
	// signature (its by and channel are the service's, not only its
	// publisher's claim): recorded as its arrival's Verified.
	Signed bool
	// Expiry says the decision was written by the expiries stream (the
	// server's write of a scheduled timeout, whose content its scheduler
	// chose): it is admitted only as the call's timeout decision.
	Expiry bool
}

// unknownEffect reports whether r answers an attempt whose worker stopped
// while running it (SPEC §13: approval_required, offload.effect unknown).
func unknownEffect(r protocol.Result) bool {
	v, _ := r.Metadata[tool.EffectMetaKey].(string)
	return v == tool.EffectUnknown
}

// AdmitWith is [State.Admit] with options. An approval of a call that
// needs a quorum (deferred.PendingTask.Required > 1, SPEC §12) is counted
// as a [Vote] of its identity (o.Identify): refused unauthenticated
// without one, duplicate_identity for a second one of the same identity,
// and refused malformed when it overrides the arguments (what the others
// approved); the call's arrival is appended only with the Required-th
// distinct identity's, so that Arrived stays false until then. A denial
// is final at once, whoever sent it.
func (s *State) AdmitWith(kind ArrivalKind, task string, data []byte, o AdmitOptions) error {
	seq, at, maxSize := o.Seq, o.At, o.MaxSize
	refuse := func(reason string, err error) error { return &RefusedError{Reason: reason, TaskID: task, Err: err} }
	opts := &protocol.DecodeOpts{MaxSize: maxSize}
	if maxSize <= 0 {
		opts.MaxSize = -1
	}
	// The task first: a message for a task that is not pending is refused
	// for that (unknown_task, duplicate), whatever its payload; malformed
	// and oversize are for a pending task's messages.
	pt, ok := s.PendingTask(task)
	switch {
	case !ok && s.Arrived(task):
		return refuse(ReasonDuplicate, errors.New("the task was already resolved"))
	case !ok:
		return refuse(ReasonUnknownTask, errors.New("no pending call of this conversation has this task ID"))
	}
	var err error
	var digest string
	var d protocol.Decision
	switch kind {
	case ArrivalDecision:
		d, err = protocol.DecodeDecision(data, opts)
		digest = d.ArgsDigest
	case ArrivalAnswer:
		var res protocol.Result
		res, err = protocol.DecodeResult(data, task, opts)
		if err == nil && res.Status != protocol.StatusOK && res.Status != protocol.StatusRetry && res.Status != protocol.StatusFailed {
			err = fmt.Errorf("an answer's status is ok, retry or failed, not %s", res.Status)
		}
	case ArrivalResult:
		var res protocol.Result
		res, err = protocol.DecodeResult(data, task, opts)
		if err == nil && (res.Status == protocol.StatusApprovalRequired && !unknownEffect(res) || res.Status == protocol.StatusCallDeferred) {
			// A background task's unknown effect (its worker stopped while
			// running it, SPEC §13) is its attempt's last word: the run
			// that reads it asks a person.
			err = fmt.Errorf("status %s is not a final result", res.Status)
		}
	default:
		err = fmt.Errorf("unknown arrival kind %q", kind)
	}
	if err != nil {
		if errors.Is(err, protocol.ErrTooLarge) {
			return refuse(ReasonOversize, err)
		}
		return refuse(ReasonMalformed, err)
	}
	switch {
	case !Accepts(kind, pt.Kind):
		return refuse(ReasonWrongKind, fmt.Errorf("the task is a pending %s call", pt.Kind))
	case s.Arrived(task):
		return refuse(ReasonDuplicate, errors.New("the task already has its answer (first wins)"))
	}
	verified := (kind == ArrivalDecision || kind == ArrivalAnswer) && o.Signed
	if kind == ArrivalDecision && (o.Expiry || IsTimeout(d)) {
		if err := checkTimeout(pt, d, at); err != nil {
			return refuse(ReasonInvalidTimeout, err)
		}
		verified = true // the call's own timeout, whoever wrote it
	}
	if digest != "" {
		want, err := protocol.ArgsDigest(pt.Args)
		if err != nil {
			return refuse(ReasonMalformed, fmt.Errorf("the pending call's arguments: %w", err))
		}
		if digest != want {
			return refuse(ReasonStale, fmt.Errorf("args_digest %s is not that of the call's arguments as pending (%s): they changed since they were shown", digest, want))
		}
	}
	if kind == ArrivalDecision && pt.Required > 1 && d.Approved {
		done, err := s.vote(pt, d, o.Identify, seq, at)
		if err != nil || !done {
			return err
		}
	}
	s.Arrivals = append(s.Arrivals, Arrival{TaskID: task, Kind: kind, Data: append([]byte(nil), data...), Seq: seq, At: at.UTC(),
		Verified: verified})
	return nil
}

// TimeoutDecision is the decision of an approval's timeout e (SPEC §12):
// by "timeout", reason expired, approved when e says approve, a denial
// (deny, fail) with e's message. It is the whole content a timeout's
// decision may have.
func TimeoutDecision(e deferred.Expiry) protocol.Decision {
	d := protocol.Decision{Approved: e.OnTimeout == "approve", By: protocol.TimeoutDecider, Reason: protocol.ReasonExpired, OnTimeout: e.OnTimeout}
	if !d.Approved {
		d.Message = e.Message
	}
	return d
}

// IsTimeout reports whether d claims to be a timeout's decision: by
// "timeout", reason expired or an on_timeout.
func IsTimeout(d protocol.Decision) bool {
	return d.By == protocol.TimeoutDecider || d.Reason == protocol.ReasonExpired || d.OnTimeout != ""
}

// checkTimeout checks timeout decision d of pending call pt, stored at
// at: pt's approval policy has a timeout, d is exactly its decision, and
// at is no earlier than the call's deferral (its task ID's time) plus the
// timeout. The service derives a timeout's content from the policy; the
// expiries stream carries whatever its scheduler wrote.
func checkTimeout(pt deferred.PendingTask, d protocol.Decision, at time.Time) error {
	if pt.Expiry == nil {
		return errors.New("a timeout's decision, and the call's approval policy sets no timeout")
	}
	want := TimeoutDecision(*pt.Expiry)
	if d.Approved != want.Approved || d.By != want.By || d.Reason != want.Reason || d.OnTimeout != want.OnTimeout || d.Message != want.Message ||
		len(d.OverrideArgs) > 0 || d.Metadata != nil || d.ArgsDigest != "" || d.Channel != "" {
		return fmt.Errorf("a timeout's decision (approved %v, by %q, on_timeout %q) that is not the call's timeout (approved %v, on_timeout %q, after %s)",
			d.Approved, d.By, d.OnTimeout, want.Approved, want.OnTimeout, pt.Expiry.After)
	}
	id, err := protocol.ParseID(pt.TaskID)
	if err != nil {
		return fmt.Errorf("a timeout's decision, and the call's task ID has no time: %w", err)
	}
	if due := id.Timestamp().Add(pt.Expiry.After); at.Before(due) {
		return fmt.Errorf("a timeout's decision stored at %s, before the call's timeout (%s)", at.UTC().Format(time.RFC3339), due.UTC().Format(time.RFC3339))
	}
	return nil
}
