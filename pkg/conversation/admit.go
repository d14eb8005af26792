package conversation

import (
	"errors"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
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
		if err == nil && (res.Status == protocol.StatusApprovalRequired || res.Status == protocol.StatusCallDeferred) {
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
	s.Arrivals = append(s.Arrivals, Arrival{TaskID: task, Kind: kind, Data: append([]byte(nil), data...), Seq: seq, At: at.UTC()})
	return nil
}
