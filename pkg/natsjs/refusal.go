package natsjs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PermissionError is an operation the server refused for lack of
// permission (a permissions violation, which the server reports
// asynchronously: a refused request gets no reply, a refused publish no
// acknowledgement). It names the user, what was refused and the fix. It
// wraps [ErrNotPermitted] and nats.ErrPermissionViolation.
type PermissionError struct {
	// User is the connection's user name when the client knows it (a user
	// and password); empty for an nkey, a credentials file or a token.
	User string
	// Subscribe is set when a subscription was refused; else a publish.
	Subject   string
	Subscribe bool
	// Queue is the queue group of a refused subscription, if any.
	Queue string
	// InboxPrefix is the prefix of the connection's reply subjects.
	InboxPrefix string
	// Need is the role of deploy/nats/auth.conf the program needs
	// ([Refusals.Role]), when known.
	Need string
}

// Error implements error: who may not do what, and the fix.
func (e *PermissionError) Error() string {
	who := "this connection's user"
	if e.User != "" {
		who = fmt.Sprintf("user %q", e.User)
	}
	op := "publish to"
	if e.Subscribe {
		op = "subscribe to"
	}
	return fmt.Sprintf("permission denied: the server does not let %s %s %q: %s", who, op, e.Subject, e.Fix())
}

// Unwrap returns ErrNotPermitted and nats.ErrPermissionViolation.
func (e *PermissionError) Unwrap() []error {
	return []error{ErrNotPermitted, nats.ErrPermissionViolation}
}

// Reply reports whether the refused subscription is the connection's own
// replies (its inbox prefix): every request waits in vain then.
func (e *PermissionError) Reply() bool {
	return e.Subscribe && (e.Subject == e.InboxPrefix || strings.HasPrefix(e.Subject, e.InboxPrefix+"."))
}

// Role returns the role of deploy/nats/auth.conf whose permissions allow
// the refused operation ("agent", "worker", "approver", "answerer",
// "admin", or "agent or worker"), or "" when no role of it does.
func (e *PermissionError) Role() string {
	if e.Reply() {
		return ""
	}
	return roleFor(e.Subscribe, e.Subject)
}

// Fix says what to change: the inbox prefix when the connection's replies
// were refused, else the role the operation (or the program) needs.
func (e *PermissionError) Fix() string {
	wrongUser := e.Need != "" && e.User != "" && e.User != e.Need
	if e.Reply() {
		want := "_INBOX_<role>"
		switch {
		case e.User != "":
			want = "_INBOX_" + e.User
		case e.Need != "":
			want = "_INBOX_" + e.Need
		}
		fix := fmt.Sprintf("the connection's replies come on %s.>, which this user may not read: start with --inbox-prefix %s (env NATS_INBOX_PREFIX), the reply prefix deploy/nats/auth.conf gives each role", e.InboxPrefix, want)
		if wrongUser {
			fix += fmt.Sprintf("; and this program needs the %s role's user, not %s", e.Need, e.User)
		}
		return fix
	}
	role := e.Role()
	switch {
	case e.User != "" && hasRole(role, e.User):
		return fmt.Sprintf("deploy/nats/auth.conf gives the %s role this subject: the server's authorization differs from it (for another --prefix, rewrite its names as its header says)", e.User)
	case wrongUser || e.Need != "" && e.User == "" && hasRole(role, e.Need):
		return fmt.Sprintf("this program needs the %s role of deploy/nats/auth.conf: connect with that role's user and credentials", e.Need)
	case role == "":
		return "no role of deploy/nats/auth.conf but admin may do it"
	default:
		return fmt.Sprintf("it takes the %s role of deploy/nats/auth.conf: connect with that role's user and credentials", role)
	}
}

// hasRole reports whether roles ("agent", "agent or worker") names role.
func hasRole(roles, role string) bool {
	return role != "" && strings.Contains(" "+roles+" ", " "+role+" ")
}

// violationRe parses nats.go's permissions violation error.
var violationRe = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"(?: using queue "([^"]+)")?`)

// permissionError returns the [*PermissionError] of err, a permissions
// violation reported on nc, or nil when err is none.
func permissionError(nc *nats.Conn, err error) *PermissionError {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	pe := &PermissionError{Subscribe: m[1] == "Subscription", Subject: m[2], Queue: m[3], InboxPrefix: nats.InboxPrefix[:len(nats.InboxPrefix)-1]}
	if nc != nil {
		if p := nc.Opts.InboxPrefix; p != "" {
			pe.InboxPrefix = p
		}
		pe.User = connUser(nc)
	}
	return pe
}

// connUser returns the user name nc connected with, when it has one with a
// password (never a token).
func connUser(nc *nats.Conn) string {
	if nc.Opts.User != "" {
		return nc.Opts.User
	}
	u, err := url.Parse(nc.ConnectedUrl())
	if err != nil || u.User == nil {
		return ""
	}
	if _, ok := u.User.Password(); !ok {
		return "" // a token
	}
	return u.User.Username()
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
		return nil
	}
	explains := func(pe *PermissionError) bool {
		return pe != nil && (pe.Reply() || !pe.Subscribe && strings.HasPrefix(pe.Subject, subject))
	}
	if pe, ok := context.Cause(ctx).(*PermissionError); ok && explains(pe) {
		return pe
	}
	if pe := permissionError(js.Conn(), js.Conn().LastError()); explains(pe) {
		return pe
	}
	return nil
}

// explain returns what stopped a JetStream request on subject that failed
// with err: the refusal that explains it (see [refused]), else err with
// the cause of ctx (see [withCause]).
func explain(ctx context.Context, js jetstream.JetStream, subject string, err error) error {
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
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return cause
	}
	return err
}

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

// roleFor returns the role of deploy/nats/auth.conf (written for any
// prefix: subjects are matched by their shape) whose permissions allow a
// publish (or a subscription) on subject, "" when none but admin's do.
func roleFor(subscribe bool, subject string) string {
	if subscribe {
		switch kindOf(subject) {
		case "progress":
			return "agent"
		case "cancel":
			return "worker"
		case "approval":
			return "approver"
		}
		return ""
	}
	for _, api := range []string{"$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.DURABLE.CREATE.", "$JS.API.CONSUMER.INFO.",
		"$JS.API.CONSUMER.DELETE.", "$JS.API.CONSUMER.MSG.NEXT.", "$JS.API.DIRECT.GET.", "$JS.API.STREAM.MSG.GET.", "$JS.ACK."} {
		if rest, ok := strings.CutPrefix(subject, api); ok {
			stream, _, _ := strings.Cut(rest, ".")
			if api == "$JS.ACK." && strings.Count(rest, ".") > 6 {
				stream = strings.Split(rest, ".")[2] // v2: $JS.ACK.<domain>.<account hash>.<stream>.…
			}
			return streamReader(stream)
		}
	}
	switch {
	case strings.HasPrefix(subject, "$JS.API.STREAM.INFO."):
		return "agent or worker"
	case strings.HasPrefix(subject, "$JS.API.STREAM.PURGE.OBJ_"):
		return "agent"
	case strings.HasPrefix(subject, "$JS.API.STREAM.MSG.DELETE.") && strings.HasSuffix(subject, "_TASKS"):
		return "worker"
	case strings.HasPrefix(subject, "$JS.API."):
		return "admin"
	case strings.HasPrefix(subject, "$KV."):
		bucket, _, _ := strings.Cut(strings.TrimPrefix(subject, "$KV."), ".")
		if strings.HasSuffix(bucket, "_registry") {
			return "worker"
		}
		return "agent"
	case strings.HasPrefix(subject, "$O."), strings.HasPrefix(subject, "$JS.FC."):
		return "agent"
	}
	switch kindOf(subject) {
	case "task", "approval", "cancel":
		return "agent"
	case "result", "progress":
		return "worker"
	case "decision":
		return "approver"
	case "answer":
		return "answerer"
	}
	return ""
}

// streamReader returns the role that reads (or, for the work queues,
// consumes) stream.
func streamReader(stream string) string {
	switch {
	case strings.HasSuffix(stream, "_TASKS"), strings.HasSuffix(stream, "_EXHAUSTED"), strings.HasSuffix(stream, "_CANCEL"):
		return "worker"
	case strings.HasSuffix(stream, "_APPROVALS"):
		return "approver"
	case strings.HasSuffix(stream, "_RESULTS"), strings.HasSuffix(stream, "_ANSWERS"), strings.HasSuffix(stream, "_DECISIONS"),
		strings.HasPrefix(stream, "KV_"), strings.HasPrefix(stream, "OBJ_"):
		return "agent"
	}
	return ""
}

// kindOf returns the kind of a protocol subject <prefix>.<kind>.…, "" for
// another subject.
func kindOf(subject string) string {
	parts := strings.SplitN(subject, ".", 3)
	if len(parts) < 3 || strings.HasPrefix(subject, "$") || strings.HasPrefix(subject, "_") {
		return ""
	}
	return parts[1]
}
