package authconf_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/authconf"
)

// A worker user's grants name its tools: every subject but the streams'
// info requests and its own inbox ends with or names one of its tools, and
// none covers a stream's messages (no message get or delete, no
// wildcard over every tool).
func TestWorkerReachesOnlyItsTools(t *testing.T) {
	t.Parallel()
	p := authconf.Worker("acme", "worker_x", []string{"alpha", "beta"})
	for _, s := range append(p.PublishSubjects(), p.SubscribeSubjects()...) {
		switch {
		case strings.HasPrefix(s, "$JS.API.STREAM.INFO."), s == "_INBOX_worker_x.>":
			continue
		case strings.Contains(s, "STREAM.MSG"), strings.HasSuffix(s, ".>") && !strings.HasPrefix(s, "$JS.ACK."):
			t.Errorf("%s: a grant over a stream's messages", s)
		case !strings.Contains(s, "alpha") && !strings.Contains(s, "beta"):
			t.Errorf("%s names none of the worker's tools", s)
		}
	}
	for _, want := range []string{
		"acme.result.*.*.alpha", "acme.progress.*.*.beta", "$KV.acme_registry.alpha.*",
		"$JS.API.CONSUMER.CREATE.ACME_TASKS.task_beta.acme.task.beta", "$JS.API.CONSUMER.MSG.NEXT.ACME_TASKS.task_alpha",
		"$JS.ACK.ACME_TASKS.task_alpha.>", "$JS.ACK.*.*.ACME_TASKS.task_alpha.>",
		"$JS.API.DIRECT.GET.ACME_CANCEL.acme.cancel.*.*.beta",
		"$KV.acme_effects.alpha.*.*", "$JS.API.DIRECT.GET.KV_acme_effects.$KV.acme_effects.beta.*.*",
		"$JS.API.DIRECT.GET.ACME_RESULTS.acme.result.*.*.alpha",
		"$KV.acme_limits.alpha.state", "$JS.API.DIRECT.GET.KV_acme_limits.$KV.acme_limits.beta.state",
		"$KV.acme_queue.alpha.*.*", "acme.dead.*.*.beta", "$JS.API.CONSUMER.PAUSE.ACME_TASKS.task_alpha",
	} {
		if !slices.Contains(p.PublishSubjects(), want) {
			t.Errorf("publish lacks %s", want)
		}
	}
	if got := p.SubscribeSubjects(); !slices.Equal(got, []string{"acme.cancel.*.*.alpha", "$KV.acme_limits.alpha.state",
		"acme.cancel.*.*.beta", "$KV.acme_limits.beta.state", "_INBOX_worker_x.>"}) {
		t.Errorf("subscribe %v", got)
	}
}

// The shipped file has a user per role and per pool of built-ins, each
// worker user's block named after it, and no worker user of every tool.
func TestShipped(t *testing.T) {
	t.Parallel()
	f := authconf.Shipped()
	var users []string
	for _, u := range f.Users {
		users = append(users, u.Name)
	}
	want := []string{"admin", "agent", "serve", "worker_sleep", "worker_http", "worker_files", "worker_shell", "approver", "answerer"}
	if !slices.Equal(users, want) {
		t.Errorf("users %v, want %v", users, want)
	}
	text := f.Render()
	for _, s := range []string{"WORKER_SHELL = {", "permissions: $WORKER_HTTP", "password: $OFFLOAD_WORKER_FILES_PASSWORD", `"tools.result.*.*.shell",`} {
		if !strings.Contains(text, s) {
			t.Errorf("rendered file lacks %q", s)
		}
	}
	if strings.Contains(text, `"tools.result.>"`) {
		t.Error("a user may publish every tool's results")
	}
}

// The service's own bucket (issue 37): the serve role reads and writes
// it; the agent role may read the decision key's public half alone, by
// its subject (no consumer, no other key; the stream's info, which every
// binary checks at start-up, names keys, no value); the decision and
// answer subjects are the serve role's, never the agent role's.
func TestServiceKeysSeparated(t *testing.T) {
	t.Parallel()
	agent, serve := authconf.Agent("acme"), authconf.Serve("acme")
	var service []string
	for _, s := range agent.PublishSubjects() {
		if strings.Contains(s, "acme_service") {
			service = append(service, s)
		}
		if s == "acme.decision.>" || s == "acme.answer.>" || strings.HasPrefix(s, "acme.wake") || strings.HasPrefix(s, "acme.event") {
			t.Errorf("the agent role may publish %s", s)
		}
	}
	if !slices.Equal(service, []string{"$JS.API.STREAM.INFO.KV_acme_service", "$JS.API.DIRECT.GET.KV_acme_service.$KV.acme_service.decisions.public"}) {
		t.Errorf("the agent role's grants on the service's bucket: %v", service)
	}
	for _, want := range []string{"$KV.acme_service.>", "$JS.API.DIRECT.GET.KV_acme_service.>", "acme.decision.>", "acme.answer.>", "acme.wake.>", "acme.event.>"} {
		if !slices.Contains(serve.PublishSubjects(), want) {
			t.Errorf("the serve role lacks %s", want)
		}
	}
}
