package natsjs

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
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
	user := userRole(e.User)
	wrongUser := e.Need != "" && e.User != "" && user != e.Need
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
	case user == "worker" && hasRole(role, user) && e.User != user && !wrongUser:
		return fmt.Sprintf("a worker user of deploy/nats/auth.conf reaches its own tools' subjects alone, and this one is not %s's: serve its tools, or give these tools a user of their own (toolworker --print-auth USER prints its entry)", e.User)
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

// userRole returns the role of a user of deploy/nats/auth.conf: "worker"
// for its worker users (worker_<pool>), else the user name.
func userRole(user string) string {
	if strings.HasPrefix(user, "worker_") {
		return "worker"
	}
	return user
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

// roleFor returns the role of deploy/nats/auth.conf (written for any
// prefix: subjects are matched by their shape) whose permissions allow a
// publish (or a subscription) on subject, "" when none but admin's do.
// The serve role (agent serve) has the agent role's grants and its own.
func roleFor(subscribe bool, subject string) string {
	role := baseRoleFor(subscribe, subject)
	if hasRole(role, "agent") && !hasRole(role, "serve") {
		role += " or serve"
	}
	return role
}

// serveConsumer reports whether rest, an API or acknowledgement subject
// after its prefix, names one of agent serve's own consumers (wake,
// notify) of stream.
func serveConsumer(stream, rest string) bool {
	consumer, _, _ := strings.Cut(strings.TrimPrefix(rest, stream+"."), ".")
	return consumer == WakeConsumerName || consumer == NotifyConsumerName
}

// baseRoleFor is roleFor but for the serve role's share of the agent
// role's grants.
func baseRoleFor(subscribe bool, subject string) string {
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
				parts := strings.Split(rest, ".") // v2: $JS.ACK.<domain>.<account hash>.<stream>.…
				stream, rest = parts[2], strings.Join(parts[2:], ".")
			}
			switch {
			case api == "$JS.API.DIRECT.GET." && peopleLookUp(stream, rest):
				return "agent or approver or answerer"
			case isServiceStream(stream) && api == "$JS.API.DIRECT.GET." && strings.HasSuffix(rest, "."+DecisionPublicKey):
				return "agent or serve"
			case isServiceStream(stream) || api != "$JS.API.DIRECT.GET." && serveConsumer(stream, rest):
				return "serve"
			}
			return streamReader(stream)
		}
	}
	switch {
	case strings.HasPrefix(subject, "$JS.API.STREAM.INFO.") && isServiceStream(strings.TrimPrefix(subject, "$JS.API.STREAM.INFO.")):
		return "agent"
	case strings.HasPrefix(subject, "$JS.API.STREAM.INFO.KV_") && strings.HasSuffix(subject, "_pending"):
		return "agent or approver or answerer"
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
		switch {
		case strings.HasSuffix(bucket, "_registry"):
			return "worker"
		case strings.HasSuffix(bucket, "_service"):
			return "serve"
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
		return "approver or serve"
	case "answer":
		return "answerer or serve"
	case "wake", "event":
		return "serve"
	}
	return ""
}

// isServiceStream reports whether stream is the service's bucket's,
// KV_<prefix>_service.
func isServiceStream(stream string) bool {
	return strings.HasPrefix(stream, "KV_") && strings.HasSuffix(stream, "_service")
}

// peopleLookUp reports whether a direct get on stream (rest: the API
// subject after $JS.API.DIRECT.GET.) is one the people roles may do as
// well as the agent: a pending record, or a task's decision or answer
// looked up by its subject.
func peopleLookUp(stream, rest string) bool {
	switch {
	case strings.HasPrefix(stream, "KV_") && strings.HasSuffix(stream, "_pending"):
		return true
	case strings.HasSuffix(stream, "_DECISIONS"):
		return kindOf(strings.TrimPrefix(rest, stream+".")) == "decision"
	case strings.HasSuffix(stream, "_ANSWERS"):
		return kindOf(strings.TrimPrefix(rest, stream+".")) == "answer"
	}
	return false
}

// streamReader returns the role that reads (or, for the work queues,
// consumes) stream.
func streamReader(stream string) string {
	switch {
	case strings.HasSuffix(stream, "_TASKS"), strings.HasSuffix(stream, "_CANCEL"):
		return "worker"
	case strings.HasSuffix(stream, "_APPROVALS"):
		return "approver"
	case strings.HasSuffix(stream, "_RESULTS"), strings.HasSuffix(stream, "_ANSWERS"), strings.HasSuffix(stream, "_DECISIONS"),
		strings.HasPrefix(stream, "KV_"), strings.HasPrefix(stream, "OBJ_"):
		return "agent"
	case strings.HasSuffix(stream, "_WAKE"), strings.HasSuffix(stream, "_EVENTS"):
		return "serve"
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
