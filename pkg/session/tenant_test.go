package session_test

import (
	"context"
	"errors"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// A conversation created with a tenant keeps it (SPEC §19): every run of
// it gives its tools the tenant, a later session opened without one
// included (a continuation on another replica); a session asking for
// another tenant, or asking one of a conversation created without, is
// refused, naming only the tenant asked for.
func TestSessionTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := conversation.NewMemory()
	var seen []string
	probe := tool.Func("probe", "Says its tenant.", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		seen = append(seen, rc.Tenant)
		return "ok", nil
	})
	set, err := tool.NewSet(probe)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{set}})
	if err != nil {
		t.Fatal(err)
	}
	id := protocol.NewID()
	run := func(cfg session.Config, create bool) error {
		cfg.Store = store
		s, err := session.Open(ctx, cfg, id, create)
		if err != nil {
			return err
		}
		defer s.Close()
		ro := &agent.RunOptions{}
		if !create {
			if ro, err = s.Continue(ctx, session.ContinueOptions{Prompt: "again"}); err != nil {
				return err
			}
		}
		_, err = s.Run(ctx, a, "go", ro)
		return err
	}
	if err := run(session.Config{Tenant: "acme"}, true); err != nil {
		t.Fatal(err)
	}
	if err := run(session.Config{}, false); err != nil { // no tenant asked: the stored one
		t.Fatal(err)
	}
	if err := run(session.Config{Tenant: "acme"}, false); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[0] != "acme" || seen[1] != "acme" || seen[2] != "acme" {
		t.Errorf("the tool saw tenants %q, want acme on each of the 3 runs", seen)
	}
	st, _, err := store.Load(ctx, id)
	if err != nil || st.Tenant != "acme" {
		t.Fatalf("stored tenant %q (%v), want acme", st.Tenant, err)
	}
	var te *session.TenantError
	if err := run(session.Config{Tenant: "globex"}, false); !errors.As(err, &te) || te.Tenant != "globex" || te.ID != id {
		t.Errorf("opened as globex: %v, want a TenantError", err)
	}
	// Refused, the conversation was released: it opens again.
	if err := run(session.Config{}, false); err != nil {
		t.Fatal(err)
	}
	none := protocol.NewID()
	s, err := session.Open(ctx, session.Config{Store: store}, none, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := session.Open(ctx, session.Config{Store: store, Tenant: "acme"}, none, false); !errors.As(err, &te) {
		t.Errorf("a conversation of no tenant opened as acme: %v, want a TenantError", err)
	}
}

// Answers given on a command line become decisions and answers, each
// with its flag; a result without "=" is refused.
func TestAnswersGiven(t *testing.T) {
	t.Parallel()
	given, flags, err := session.Answers{Approve: []string{"A"}, Deny: []string{"B=too risky", "C"}, Results: []string{`D={"content":"42"}`}}.Given()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ flag, task, data string }{
		{"--approve-task", "A", `{"approved":true}`},
		{"--deny-task", "B", `{"approved":false,"message":"too risky"}`},
		{"--deny-task", "C", `{"approved":false}`},
		{"--result", "D", `{"content":"42"}`},
	}
	if len(given) != len(want) {
		t.Fatalf("given %+v", given)
	}
	for i, w := range want {
		if flags[i] != w.flag || given[i].TaskID != w.task || string(given[i].Data) != w.data {
			t.Errorf("given[%d] = %s %s %s, want %s %s %s", i, flags[i], given[i].TaskID, given[i].Data, w.flag, w.task, w.data)
		}
	}
	if _, _, err := (session.Answers{Results: []string{"D"}}).Given(); err == nil {
		t.Error("--result without = was taken")
	}
}
