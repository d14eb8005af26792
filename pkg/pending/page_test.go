package pending_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// pausedAs saves a new conversation of agent that waits for tasks.
func (w *world) pausedAs(t *testing.T, agent string, tasks ...deferred.PendingTask) (*conversation.State, conversation.Revision) {
	t.Helper()
	id := protocol.NewID()
	st := &conversation.State{ID: id, Agent: &conversation.AgentRef{Name: agent},
		History: message.History{message.NewRequest(message.UserText("deploy it"))},
		Pending: &deferred.PendingRecord{ConversationID: id, RunID: protocol.NewID(), Tasks: tasks}}
	rev, err := w.store.Save(t.Context(), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	return st, rev
}

// walk reads every page of f, limit calls each, calling between with
// the task IDs listed so far after each page but the last, and returns
// the task IDs listed, in order.
func (w *world) walk(t *testing.T, f pending.Filter, limit int, between func(listed []string)) []string {
	t.Helper()
	var out []string
	cursor := ""
	for i := 0; ; i++ {
		page, err := w.desk.Page(t.Context(), f, cursor, limit)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if len(page.Calls) > limit {
			t.Fatalf("page %d holds %d calls, over its limit %d", i, len(page.Calls), limit)
		}
		for _, c := range page.Calls {
			if !f.Keeps(c) {
				t.Errorf("page %d lists %s (%s of %s, %s), which the filter does not select", i, c.TaskID, c.Tool, c.Agent, c.Kind)
			}
			out = append(out, c.TaskID)
		}
		if page.Next == "" {
			return out
		}
		if i > 1000 {
			t.Fatal("the pages never end")
		}
		cursor = page.Next
		if between != nil {
			between(out)
		}
	}
}

// TestDeskPages: the pages of the calls that wait, read from the index of
// pending calls, walk each call exactly once while calls are saved
// pending and resolved between the pages: a call pending throughout is
// listed once, one resolved before its page is not listed, one saved
// pending during the walk is listed once; each filter (tool, kind,
// agent, an agent's name that is no subject token) selects server-side
// what it lists.
func TestDeskPages(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pending.Config{})
	ctx := t.Context()
	type conv struct {
		st  *conversation.State
		rev conversation.Revision
	}
	var convs []conv
	agents := []string{"ops", "dev", "team a.b"}
	for i := range 24 {
		tasks := []deferred.PendingTask{approval("deploy", fmt.Sprintf(`{"target":"%d"}`, i))}
		switch i % 4 {
		case 1:
			tasks = append(tasks, deferred.PendingTask{TaskID: protocol.NewID(), Kind: deferred.KindExternal, Tool: "ask", Args: json.RawMessage(`{}`)})
		case 2:
			tasks = append(tasks, deferred.PendingTask{TaskID: protocol.NewID(), Kind: deferred.KindBackground, Tool: "crawl", Args: json.RawMessage(`{}`)})
		}
		st, rev := w.pausedAs(t, agents[i%3], tasks...)
		convs = append(convs, conv{st, rev})
	}
	all, err := w.desk.Calls(ctx, pending.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 36 {
		t.Fatalf("Calls lists %d calls, want 36", len(all))
	}
	ids := func(calls []pending.Call) []string {
		var out []string
		for _, c := range calls {
			out = append(out, c.TaskID)
		}
		slices.Sort(out)
		return out
	}

	// Without changes, the pages of each filter list what Calls lists of
	// it, each call once.
	for _, f := range []pending.Filter{{}, {Kinds: pending.ForPeople}, {Tool: "ask"}, {Agent: "team a.b"},
		{Agent: "dev", Kinds: []deferred.Kind{deferred.KindBackground}}, {Kinds: []deferred.Kind{deferred.KindApproval, deferred.KindBackground}}} {
		want, err := w.desk.Calls(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		got := w.walk(t, f, 5, nil)
		slices.Sort(got)
		if !slices.Equal(got, ids(want)) {
			t.Errorf("filter %+v: the pages list %v, want %v", f, got, ids(want))
		}
	}

	// While the pages are read: after each page, a conversation near
	// the end none of whose calls was listed yet is resolved (saved with
	// nothing pending) and a new one paused; one call of the first
	// conversation is decided before.
	resolved, added := map[string]bool{}, map[string]bool{}
	next := len(convs) - 1
	decided := convs[0].st.Pending.Tasks[0].TaskID
	if _, err := w.desk.Decide(ctx, convs[0].st.ID, decided, protocol.Decision{Approved: true}); err != nil {
		t.Fatal(err)
	}
	got := w.walk(t, pending.Filter{}, 4, func(listed []string) {
		if next > 12 && !slices.ContainsFunc(convs[next].st.Pending.Tasks, func(tk deferred.PendingTask) bool { return slices.Contains(listed, tk.TaskID) }) {
			c := convs[next]
			for _, tk := range c.st.Pending.Tasks {
				resolved[tk.TaskID] = true
			}
			c.st.Pending = nil
			if _, err := w.store.Save(ctx, c.st, c.rev); err != nil {
				t.Fatal(err)
			}
			next--
		}
		st, _ := w.pausedAs(t, "ops", approval("deploy", `{"target":"new"}`))
		added[st.Pending.Tasks[0].TaskID] = true
		// A conversation saved again, still waiting for the same calls
		// (listed already): its calls keep their place.
		var err error
		if convs[1].rev, err = w.store.Save(ctx, convs[1].st, convs[1].rev); err != nil {
			t.Fatal(err)
		}
	})
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
		if seen[id] > 1 {
			t.Errorf("call %s listed on two pages", id)
		}
		if resolved[id] {
			t.Errorf("call %s listed after its conversation was resolved", id)
		}
	}
	if seen[decided] != 0 {
		t.Errorf("the decided call %s is listed", decided)
	}
	for _, c := range all {
		if !resolved[c.TaskID] && c.TaskID != decided && seen[c.TaskID] != 1 {
			t.Errorf("call %s, pending throughout, listed %d times", c.TaskID, seen[c.TaskID])
		}
	}
	// Each call saved pending during the walk comes after every entry
	// read so far: listed once, on a later page.
	for id := range added {
		if seen[id] != 1 {
			t.Errorf("call %s, saved pending during the walk, listed %d times", id, seen[id])
		}
	}
	if len(resolved) == 0 || len(added) == 0 {
		t.Errorf("the walk saw %d calls resolved and %d added: the test changed nothing", len(resolved), len(added))
	}
}

// TestDeskPageCursor: a cursor is the page before's next for the same
// filter; a garbled one, an altered one and one of another filter are
// refused with a *CursorError, which says so; the limit is cut to
// MaxPageSize and defaults to DefaultPageSize.
func TestDeskPageCursor(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pending.Config{})
	ctx := t.Context()
	for range 3 {
		w.paused(t, approval("deploy", `{}`))
	}
	page, err := w.desk.Page(ctx, pending.Filter{}, "", 1)
	if err != nil || len(page.Calls) != 1 || page.Next == "" {
		t.Fatalf("first page = %+v, %v; want one call and a next", page, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(page.Next)
	if err != nil {
		t.Fatal(err)
	}
	altered := []byte(string(raw))
	altered[3]++ // the sequence
	for name, cursor := range map[string]string{
		"garbled":        "not a cursor!",
		"base64 of junk": base64.RawURLEncoding.EncodeToString([]byte("p1.12.zz")),
		"altered":        base64.RawURLEncoding.EncodeToString(altered),
	} {
		_, err := w.desk.Page(ctx, pending.Filter{}, cursor, 1)
		var ce *pending.CursorError
		if !errors.As(err, &ce) || ce.Cursor != cursor {
			t.Errorf("%s cursor: %v, want a CursorError", name, err)
		}
	}
	var ce *pending.CursorError
	if _, err := w.desk.Page(ctx, pending.Filter{Tool: "deploy"}, page.Next, 1); !errors.As(err, &ce) {
		t.Errorf("a cursor of another filter: %v, want a CursorError", err)
	}
	second, err := w.desk.Page(ctx, pending.Filter{}, page.Next, 1)
	if err != nil || len(second.Calls) != 1 || second.Calls[0].TaskID == page.Calls[0].TaskID {
		t.Fatalf("second page = %+v, %v", second, err)
	}
	if whole, err := w.desk.Page(ctx, pending.Filter{}, "", pending.MaxPageSize*10); err != nil || len(whole.Calls) != 3 || whole.Next != "" {
		t.Errorf("a page over the cap = %+v, %v; want the 3 calls and no next", whole, err)
	}
}

// live is the approvals live runs announced, as agentproc.OpenDesk
// reads them.
type live struct{ p *convstore.Pending }

func (l live) Conversations(ctx context.Context) []string { return l.p.Announcer.Conversations(ctx) }
func (l live) Waiting(ctx context.Context, conv string, skip map[string]bool) []deferred.PendingTask {
	return l.p.LiveWaiting(ctx, conv, skip)
}

// With Config.Live, the first page also lists, first and within its
// limit, the approvals live runs announced that no record holds yet
// (agent --approve wait), the filter applied; later pages do not list
// them again.
func TestDeskPageWithLive(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := t.Context()
	if err := natsjs.Provision(ctx, js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	store, err := convstore.New(ctx, convstore.Config{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	d, err := pending.New(pending.Config{Records: recs, Live: live{recs}})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{js: js, store: store, desk: d}
	st1, _ := w.paused(t, approval("deploy", `{}`))
	st2, _ := w.paused(t, approval("deploy", `{}`))
	conv := protocol.NewID()
	announced := approval("shell", `{"cmd":"ls"}`)
	if err := recs.Announcer.Announce(ctx, &deferred.PendingRecord{ConversationID: conv, Tasks: []deferred.PendingTask{announced}}); err != nil {
		t.Fatal(err)
	}
	first, err := d.Page(ctx, pending.Filter{}, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range first.Calls {
		got = append(got, c.TaskID)
	}
	if !slices.Equal(got, []string{announced.TaskID, st1.Pending.Tasks[0].TaskID}) || first.Next == "" {
		t.Fatalf("first page = %v (next %q), want the announced approval, then the first record's", got, first.Next)
	}
	second, err := d.Page(ctx, pending.Filter{}, first.Next, 2)
	if err != nil || len(second.Calls) != 1 || second.Calls[0].TaskID != st2.Pending.Tasks[0].TaskID {
		t.Fatalf("second page = %+v, %v; want only the second record's call", second, err)
	}
	if p, err := d.Page(ctx, pending.Filter{Tool: "deploy"}, "", 5); err != nil || len(p.Calls) != 2 {
		t.Fatalf("a page of deploy = %+v, %v; want the two records' calls, not the announced shell", p, err)
	}
}
