package natsjs_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
)

// A user who may not read the connection's replies: a request waits for a
// reply that cannot come. Without a watch the look-up times out, and its
// error says why (the refused subscription, the user, the inbox prefix to
// use) rather than "context deadline exceeded".
func TestRefusedRepliesExplainTheTimeout(t *testing.T) {
	t.Parallel()
	srv := limitedServer(t, &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_u.>"}},
	})
	nc, err := natsjs.Connect(strings.Replace(srv.URL(), "nats://", "nats://u:pw@", 1), natsjs.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	err = natsjs.Provision(t.Context(), js, natsjs.ProvisionOptions{})
	var pe *natsjs.PermissionError
	if !errors.As(err, &pe) || !pe.Reply() || pe.User != "u" || !errors.Is(err, natsjs.ErrNotPermitted) || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("err = %v, want a refusal of the replies", err)
	}
	for _, want := range []string{`user "u" subscribe to "_INBOX.`, "--inbox-prefix _INBOX_u"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
}

// With Refusals, a start-up watching them ends at the refusal, not at its
// timeout: the dispatcher's results consumer, which this user may not
// create, fails at once naming the subject, the user and the role the
// program needs; the refusal is logged and kept.
func TestRefusalsEndTheWaitAtOnce(t *testing.T) {
	t.Parallel()
	srv := limitedServer(t, &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.STREAM.INFO.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	})
	var logs offloadtest.Output
	refusals := &natsjs.Refusals{Role: "agent"}
	nc, err := natsjs.Connect(srv.URL(), natsjs.ConnectOptions{Extra: []nats.Option{nats.UserInfo("u", "pw")}, Refusals: refusals,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	ctx, stop := refusals.Watch(ctx)
	defer stop()
	start := time.Now()
	err = d.Start(ctx)
	took := time.Since(start)
	var pe *natsjs.PermissionError
	if !errors.As(err, &pe) || pe.Reply() || pe.Need != "agent" || !strings.HasPrefix(pe.Subject, "$JS.API.CONSUMER.CREATE.TOOLS_RESULTS.") {
		t.Fatalf("err = %v, want the refused consumer", err)
	}
	if want := `natsjs: dispatcher: results consumer: permission denied: the server does not let user "u" publish to "$JS.API.CONSUMER.CREATE.TOOLS_RESULTS.`; !strings.HasPrefix(err.Error(), want) ||
		!strings.Contains(err.Error(), "this program needs the agent role") {
		t.Errorf("err = %v, want %q… naming the agent role", err, want)
	}
	if took >= 5*time.Second {
		t.Errorf("took %s: the start waited for its timeout", took)
	}
	if refusals.Last() == nil || !strings.Contains(logs.String(), `msg="nats refused an operation"`) {
		t.Errorf("last refusal %v, logs %q", refusals.Last(), logs.String())
	}
}

// The role a refused subject takes, as deploy/nats/auth.conf gives them,
// for any prefix.
func TestPermissionErrorRole(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		subject   string
		subscribe bool
		want      string
	}{
		{"tools.task.shell", false, "agent or serve"},
		{"acme.cancel.C.T", false, "agent or serve"},
		{"tools.result.C.T", false, "worker"},
		{"tools.progress.C.T", false, "worker"},
		{"tools.decision.C.T", false, "approver or serve"},
		{"tools.answer.C.T", false, "answerer or serve"},
		{"tools.progress.>", true, "agent or serve"},
		{"tools.cancel.>", true, "worker"},
		{"tools.approval.>", true, "approver"},
		{"tools.task.>", true, ""},
		{"$JS.API.CONSUMER.CREATE.TOOLS_RESULTS.x.tools.result.>", false, "agent or serve"},
		{"$JS.API.CONSUMER.INFO.TOOLS_TASKS.task_sleep", false, "worker"},
		{"$JS.API.CONSUMER.MSG.NEXT.ACME_TASKS.task_x", false, "worker"},
		{"$JS.API.DIRECT.GET.TOOLS_CANCEL.tools.cancel.C.T", false, "worker"},
		{"$JS.API.CONSUMER.CREATE.TOOLS_APPROVALS.x", false, "approver"},
		{"$JS.API.CONSUMER.CREATE.KV_tools_registry.x", false, "agent or serve"},
		{"$JS.API.STREAM.INFO.KV_tools_registry", false, "agent or worker or serve"},
		{"$JS.API.STREAM.CREATE.TOOLS_TASKS", false, "admin"},
		{"$JS.API.STREAM.PURGE.OBJ_tools_histories", false, "agent or serve"},
		{"$JS.ACK.TOOLS_TASKS.task_x.1.2.3.4.5", false, "worker"},
		{"$KV.tools_registry.sleep.w1", false, "worker"},
		{"$KV.tools_conversations.C", false, "agent or serve"},
		{"$O.tools_histories.C", false, "agent or serve"},
		{"$JS.API.DIRECT.GET.KV_tools_pending.$KV.tools_pending.C", false, "agent or approver or answerer or serve"},
		{"$JS.API.DIRECT.GET.TOOLS_DECISIONS.tools.decision.C.T", false, "agent or approver or answerer or serve"},
		{"$JS.API.DIRECT.GET.TOOLS_ANSWERS.tools.answer.C.T", false, "agent or approver or answerer or serve"},
		{"$JS.API.STREAM.INFO.KV_tools_pending", false, "agent or approver or answerer or serve"},
		{"$KV.tools_pending.C", false, "agent or serve"},
		// agent serve's own (issue 37).
		{"tools.wake.C", false, "serve"},
		{"tools.event.C", false, "serve"},
		{"$KV.tools_service.links.key", false, "serve"},
		{"$JS.API.STREAM.INFO.KV_tools_service", false, "agent or serve"},
		{"$JS.API.DIRECT.GET.KV_tools_service.$KV.tools_service.links.key", false, "serve"},
		{"$JS.API.DIRECT.GET.KV_tools_service.$KV.tools_service.decisions.public", false, "agent or serve"},
		{"$JS.API.CONSUMER.CREATE.TOOLS_DECISIONS.wake", false, "serve"},
		{"$JS.ACK.TOOLS_WAKE.wake.1.2.3.4.5", false, "serve"},
		{"$JS.ACK.D.H.TOOLS_RESULTS.wake.1.2.3.4.5.6.7", false, "serve"},
		{"$JS.API.CONSUMER.MSG.NEXT.TOOLS_APPROVALS.notify", false, "serve"},
	} {
		pe := &natsjs.PermissionError{Subject: c.subject, Subscribe: c.subscribe, InboxPrefix: "_INBOX"}
		if got := pe.Role(); got != c.want {
			t.Errorf("%s (subscribe %v): role %q, want %q", c.subject, c.subscribe, got, c.want)
		}
	}
	// The fix names what to change.
	for _, c := range []struct {
		pe   natsjs.PermissionError
		want string
	}{
		{natsjs.PermissionError{User: "agent", Subscribe: true, Subject: "_INBOX.x.*", InboxPrefix: "_INBOX"}, "start with --inbox-prefix _INBOX_agent"},
		{natsjs.PermissionError{Subscribe: true, Subject: "_INBOX.x.*", InboxPrefix: "_INBOX", Need: "worker"}, "start with --inbox-prefix _INBOX_worker"},
		{natsjs.PermissionError{User: "worker", Subscribe: true, Subject: "_INBOX.x.*", InboxPrefix: "_INBOX", Need: "agent"}, "--inbox-prefix _INBOX_worker (env NATS_INBOX_PREFIX), the reply prefix deploy/nats/auth.conf gives each role; and this program needs the agent role's user, not worker"},
		{natsjs.PermissionError{User: "worker", Subject: "tools.task.x", InboxPrefix: "_INBOX", Need: "agent"}, "this program needs the agent role of deploy/nats/auth.conf"},
		{natsjs.PermissionError{User: "bob", Subject: "tools.task.x", InboxPrefix: "_INBOX"}, "it takes the agent or serve role of deploy/nats/auth.conf"},
		{natsjs.PermissionError{User: "agent", Subject: "tools.task.x", InboxPrefix: "_INBOX", Need: "agent"}, "deploy/nats/auth.conf gives the agent role this subject: the server's authorization differs"},
		{natsjs.PermissionError{User: "agent", Subject: "$JS.API.STREAM.CREATE.X", InboxPrefix: "_INBOX"}, "it takes the admin role"},
		// A worker user of one pool serving another's tool.
		{natsjs.PermissionError{User: "worker_http", Subject: "$JS.API.CONSUMER.INFO.TOOLS_TASKS.task_sleep", InboxPrefix: "_INBOX_worker_http", Need: "worker"},
			"reaches its own tools' subjects alone, and this one is not worker_http's"},
		{natsjs.PermissionError{User: "worker_sleep", Subject: "tools.task.x", InboxPrefix: "_INBOX_worker_sleep", Need: "agent"}, "this program needs the agent role of deploy/nats/auth.conf"},
		{natsjs.PermissionError{User: "worker_sleep", Subject: "$JS.API.STREAM.INFO.KV_tools_registry", InboxPrefix: "_INBOX_worker_sleep", Need: "agent"}, "this program needs the agent role of deploy/nats/auth.conf"},
		{natsjs.PermissionError{User: "worker_sleep", Subscribe: true, Subject: "_INBOX.x.*", InboxPrefix: "_INBOX", Need: "worker"}, "start with --inbox-prefix _INBOX_worker_sleep (env"},
	} {
		if got := c.pe.Fix(); !strings.Contains(got, c.want) {
			t.Errorf("%+v: fix %q, want %q", c.pe, got, c.want)
		}
	}
}
