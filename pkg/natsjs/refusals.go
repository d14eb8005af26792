package natsjs

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Refusals records the permissions violations the server reports on a
// connection made by [Connect] (ConnectOptions.Refusals), so that an
// operation waiting for a reply that can never come (its request or the
// connection's replies refused) stops at once with what was refused,
// rather than when it times out. The zero value is ready to use; its
// methods are safe for concurrent use, and a nil *Refusals records nothing.
type Refusals struct {
	// Role, when set, is the role of deploy/nats/auth.conf the
	// connection's user is meant to have (the agent's, the worker's): the
	// fix of a refusal names it (PermissionError.Need).
	Role string

	mu      sync.Mutex
	last    *PermissionError
	watches map[*refusalWatch]struct{}
}

type refusalWatch struct{ cancel context.CancelCauseFunc }

// Watch returns a copy of ctx that is cancelled, with the
// [*PermissionError] as its cause ([context.Cause]), at the next refusal
// the server reports on the connection, whichever operation it refused:
// meant for a start-up, where any refusal means the user lacks a
// permission it needs. stop releases the copy.
func (r *Refusals) Watch(ctx context.Context) (watched context.Context, stop context.CancelFunc) {
	wctx, cancel := context.WithCancelCause(ctx)
	if r == nil {
		return wctx, func() { cancel(nil) }
	}
	w := &refusalWatch{cancel: cancel}
	r.mu.Lock()
	if r.watches == nil {
		r.watches = make(map[*refusalWatch]struct{})
	}
	r.watches[w] = struct{}{}
	r.mu.Unlock()
	return wctx, func() {
		r.mu.Lock()
		delete(r.watches, w)
		r.mu.Unlock()
		cancel(nil)
	}
}

// Last returns the last refusal the server reported, or nil.
func (r *Refusals) Last() *PermissionError {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// need returns the role the connection needs, if known.
func (r *Refusals) need() string {
	if r == nil {
		return ""
	}
	return r.Role
}

// record notes a refusal and ends the watches.
func (r *Refusals) record(pe *PermissionError) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = pe
	for w := range r.watches {
		w.cancel(pe)
	}
}

// refused returns the refusal that explains err, the failure of a
// JetStream request on subject: a refusal of a publish on subject, or of
// the connection's replies (no request can get its reply then), that
// ended ctx ([Refusals.Watch]) or that the server last reported on js's
// connection. Nil when err is nil or the server's own answer (the request
// was not refused), or when no such refusal was reported.
func refused(ctx context.Context, js jetstream.JetStream, subject string, err error) *PermissionError {
	var je jetstream.JetStreamError
	if err == nil || errors.As(err, &je) && je.APIError() != nil {
		return nil //nolint:nilerr // the result is the refusal, not an error: a server's answer is none
	}
	explains := func(pe *PermissionError) bool {
		return pe != nil && (pe.Reply() || !pe.Subscribe && strings.HasPrefix(pe.Subject, subject))
	}
	var pe *PermissionError
	if errors.As(context.Cause(ctx), &pe) && explains(pe) {
		return pe
	}
	if pe := permissionError(js.Conn(), js.Conn().LastError()); explains(pe) {
		return pe
	}
	return nil
}

// Explain returns what stopped a JetStream request on subject that failed
// with err: the refusal that explains it (a [*PermissionError]: a refused
// publish on subject, or refused replies, that ended ctx through
// [Refusals.Watch] or that the server last reported on js's connection),
// else err, or ctx's cause when err is ctx's own end and ctx was cancelled
// with a cause of its own: what stopped the request rather than "context
// canceled".
func Explain(ctx context.Context, js jetstream.JetStream, subject string, err error) error {
	if pe := refused(ctx, js, subject, err); pe != nil {
		return pe
	}
	return withCause(ctx, err)
}

// withCause returns err, or the cause of ctx when err is ctx's own end
// and ctx was cancelled with a cause of its own (a refusal, see
// [Refusals.Watch]): what stopped the operation rather than "context
// canceled".
func withCause(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() { //nolint:errorlint // a cause of its own is one that is not ctx's error itself
		return cause
	}
	return err
}
