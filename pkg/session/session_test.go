package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// recorder is the Announcer and Canceller of the tests.
type recorder struct {
	announced   []string
	resolutions []protocol.Resolution
	cancels     []string
}

func (r *recorder) Announce(_ context.Context, rec *deferred.PendingRecord) error {
	for _, t := range rec.Tasks {
		if t.Kind == deferred.KindApproval {
			r.announced = append(r.announced, t.TaskID)
		}
	}
	return nil
}

func (r *recorder) Resolve(_ context.Context, _ string, res protocol.Resolution) error {
	r.resolutions = append(r.resolutions, res)
	return nil
}

func (r *recorder) Cancel(_ context.Context, _, task, _ string) error {
	r.cancels = append(r.cancels, task)
	return nil
}

type deployArgs struct {
	Target string `json:"target"`
}

// pausedConversation runs an agent whose model calls deploy (approval),
// ask (external) and research (background, still running) once, and
// stores what it left pending, as agent run does.
func pausedConversation(t *testing.T, store conversation.Store, rec *recorder) (string, *deferred.PendingRecord) {
	t.Helper()
	ctx := context.Background()
	deploy := tool.Func("deploy", "Deploy.", func(_ context.Context, _ *tool.RunContext, a deployArgs) (string, error) {
		return "deployed " + a.Target, nil
	}, tool.NeedsApproval())
	ext, err := tool.External(tool.Def{Name: "ask", Description: "Ask.", Parameters: json.RawMessage(`{"type":"object"}`)})
	if err != nil {
		t.Fatal(err)
	}
	fns, err := tool.NewSet(deploy)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{}), Toolsets: []tool.Toolset{fns, ext}, AllowDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	id := protocol.NewID()
	s, err := session.Open(ctx, session.Config{Store: store, Announcer: rec, Canceller: rec}, id, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := a.Run(ctx, "go", &agent.RunOptions{ConversationID: id, Capabilities: []agent.Capability{s.Checkpointer()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, res, nil); err != nil {
		t.Fatal(err)
	}
	return id, res.PendingRecord()
}

func taskOf(t *testing.T, rec *deferred.PendingRecord, kind deferred.Kind) deferred.PendingTask {
	t.Helper()
	for _, p := range rec.Tasks {
		if p.Kind == kind {
			return p
		}
	}
	t.Fatalf("no %s task in %+v", kind, rec.Tasks)
	return deferred.PendingTask{}
}

// A pause is stored and announced; answers given one at a time keep the
// conversation waiting; once all have arrived, Prepare builds the
// deferred results (decision with override args and by, answer), the
// resumed run applies them, the decision is kept in the history's
// metadata, decided approvals are resolved and the answered external
// call is cancelled on the workers.
func TestSessionPauseAndResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := conversation.NewMemory()
	rec := &recorder{}
	id, pending := pausedConversation(t, store, rec)
	appr, ext := taskOf(t, pending, deferred.KindApproval), taskOf(t, pending, deferred.KindExternal)
	if len(rec.announced) != 1 || rec.announced[0] != appr.TaskID {
		t.Fatalf("announced %v", rec.announced)
	}

	s, err := session.Open(ctx, session.Config{Store: store, Announcer: rec, Canceller: rec}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Admit(conversation.ArrivalDecision, appr.TaskID, []byte(`{"approved":true,"override_args":{"target":"staging"},"by":"ann"}`)); err != nil {
		t.Fatal(err)
	}
	if w := s.Unresolved(deferred.KindApproval, deferred.KindExternal); len(w) != 1 || w[0].TaskID != ext.TaskID {
		t.Fatalf("waiting %+v", w)
	}
	if _, err := s.Prepare(""); err == nil {
		t.Fatal("Prepare with a call still waiting")
	}
	// Checked like wire messages: a second decision, a decision for the
	// external call, malformed JSON.
	for _, c := range []struct {
		kind   conversation.ArrivalKind
		task   string
		data   string
		reason string
	}{
		{conversation.ArrivalDecision, appr.TaskID, `{"approved":false}`, conversation.ReasonDuplicate},
		{conversation.ArrivalDecision, ext.TaskID, `{"approved":true}`, conversation.ReasonWrongKind},
		{conversation.ArrivalAnswer, ext.TaskID, `{nope`, conversation.ReasonMalformed},
		{conversation.ArrivalDecision, protocol.NewID(), `{"approved":true}`, conversation.ReasonUnknownTask},
	} {
		var re *conversation.RefusedError
		if err := s.Admit(c.kind, c.task, []byte(c.data)); !errors.As(err, &re) || re.Reason != c.reason {
			t.Errorf("%s %s: %v, want %s", c.kind, c.data, err, c.reason)
		}
	}
	if err := s.Admit(conversation.ArrivalAnswer, ext.TaskID, []byte(`{"content":"42"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx); err != nil {
		t.Fatal(err)
	}
	opts, err := s.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := opts.DeferredResults.Approvals[appr.ToolCallID].(deferred.ToolApproved); !ok || string(v.OverrideArgs) != `{"target":"staging"}` {
		t.Errorf("approval %#v", opts.DeferredResults.Approvals[appr.ToolCallID])
	}
	if v, ok := opts.DeferredResults.Calls[ext.ToolCallID].(tool.Return); !ok || string(v.Value.(json.RawMessage)) != `"42"` {
		t.Errorf("call %#v", opts.DeferredResults.Calls[ext.ToolCallID])
	}

	deploy := tool.Func("deploy", "Deploy.", func(_ context.Context, _ *tool.RunContext, a deployArgs) (string, error) {
		return "deployed " + a.Target, nil
	}, tool.NeedsApproval())
	ext2, _ := tool.External(tool.Def{Name: "ask", Description: "Ask.", Parameters: json.RawMessage(`{"type":"object"}`)})
	fns, _ := tool.NewSet(deploy)
	a, err := agent.New(agent.Config{Model: testmodel.New(testmodel.Config{CallTools: []string{}}), Toolsets: []tool.Toolset{fns, ext2}, AllowDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	opts.Capabilities = []agent.Capability{s.Checkpointer()}
	res, err := a.Run(ctx, "", opts)
	if err != nil || res.Paused() {
		t.Fatalf("resumed run: %v, paused %v", err, res.Paused())
	}
	if err := s.Finish(ctx, res, nil); err != nil {
		t.Fatal(err)
	}
	st, _, err := store.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != nil || len(st.Arrivals) != 0 || len(st.Settled) != 2 {
		t.Errorf("stored pending %+v arrivals %v settled %v", st.Pending, st.Arrivals, st.Settled)
	}
	// Neither was settled by a result read from the results stream: a
	// result stored there for either is the run's (or a late copy's).
	if len(st.SettledLive) != 2 {
		t.Errorf("settled live %v, want both tasks", st.SettledLive)
	}
	var note map[string]any
	for _, m := range st.History {
		for _, p := range m.Parts {
			if tr, ok := p.(message.ToolReturn); ok && tr.ToolName == "deploy" {
				note, _ = tr.Metadata[session.DecisionMetaKey].(map[string]any)
				if message.ContentText(tr.Content) != "deployed staging" {
					t.Errorf("deploy returned %s", tr.Content)
				}
			}
		}
	}
	if note["by"] != "ann" || note["task_id"] != appr.TaskID || note["approved"] != true {
		t.Errorf("decision note %v", note)
	}
	if len(rec.resolutions) != 1 || rec.resolutions[0].Resolved != protocol.ResolvedApproved || rec.resolutions[0].By != "ann" {
		t.Errorf("resolutions %+v", rec.resolutions)
	}
	if len(rec.cancels) != 1 || rec.cancels[0] != ext.TaskID {
		t.Errorf("cancels %v: the answered external call's worker copy is cancelled", rec.cancels)
	}
	// Late messages for the settled tasks are duplicates now.
	s.Close()
	s2, err := session.Open(ctx, session.Config{Store: store}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var re *conversation.RefusedError
	if err := s2.Admit(conversation.ArrivalAnswer, ext.TaskID, []byte(`{"content":"43"}`)); !errors.As(err, &re) || re.Reason != conversation.ReasonDuplicate {
		t.Errorf("late answer: %v", err)
	}
	if _, err := s2.Prepare(""); !errors.Is(err, session.ErrNothingToResume) {
		t.Errorf("Prepare of an ended conversation: %v", err)
	}
}

// Background outcomes that arrived are adopted in arrival order, before
// the tasks still running.
func TestSessionAdoptsBackgroundInArrivalOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := conversation.NewMemory()
	id := protocol.NewID()
	a, b, c := protocol.NewID(), protocol.NewID(), protocol.NewID()
	st := &conversation.State{ID: id, Pending: &deferred.PendingRecord{ConversationID: id, Tasks: []deferred.PendingTask{
		{TaskID: a, Kind: deferred.KindBackground, Tool: "t"},
		{TaskID: b, Kind: deferred.KindBackground, Tool: "t"},
		{TaskID: c, Kind: deferred.KindBackground, Tool: "t"},
	}}}
	if _, err := store.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(ctx, session.Config{Store: store}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, x := range []struct{ task, data string }{{c, `{"content":"c"}`}, {a, `{"status":"failed","message":"no"}`}} {
		if err := s.Admit(conversation.ArrivalResult, x.task, []byte(x.data)); err != nil {
			t.Fatal(err)
		}
	}
	opts, err := s.Prepare("")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, at := range opts.Background {
		order = append(order, at.Task.TaskID)
	}
	if len(order) != 3 || order[0] != c || order[1] != a || order[2] != b || !opts.Background[0].Done || opts.Background[2].Done {
		t.Fatalf("adopted %+v, want c, a (done) then b (running)", opts.Background)
	}
	var tf *tool.ToolFailed
	if !errors.As(opts.Background[1].Err, &tf) || tf.Message != "no" {
		t.Errorf("failed outcome %v", opts.Background[1].Err)
	}
	if opts.DeferredResults != nil {
		t.Errorf("no deferred call: %+v", opts.DeferredResults)
	}
}

// A second Open of a claimed conversation waits, then gives up with a
// *ClaimedError.
func TestSessionClaimed(t *testing.T) {
	t.Parallel()
	store := conversation.NewMemory()
	id := protocol.NewID()
	s, err := session.Open(context.Background(), session.Config{Store: store}, id, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := session.Open(ctx, session.Config{Store: store}, id, false); err == nil {
		t.Fatal("a claimed conversation was opened twice")
	}
}

// losingStore is a Memory store whose leases the test can mark lost.
type losingStore struct {
	*conversation.Memory
	lost chan struct{}
}

func (s losingStore) Claim(ctx context.Context, id, holder string) (conversation.Lease, error) {
	l, err := s.Memory.Claim(ctx, id, holder)
	if err != nil {
		return nil, err
	}
	return losingLease{Lease: l, lost: s.lost}, nil
}

type losingLease struct {
	conversation.Lease
	lost chan struct{}
}

func (l losingLease) Lost() <-chan struct{} { return l.lost }

// A session whose lease was lost writes nothing more: Save and Finish fail
// with ErrLeaseLost and the stored state stays as it was, for the process
// that claimed the conversation since.
func TestLostLeaseStopsSaves(t *testing.T) {
	ctx := context.Background()
	store := losingStore{Memory: conversation.NewMemory(), lost: make(chan struct{})}
	id := protocol.NewID()
	s, err := session.Open(ctx, session.Config{Store: store}, id, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Save(ctx); err != nil {
		t.Fatalf("save while the lease holds: %v", err)
	}
	_, rev, err := store.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	close(store.lost)
	if err := s.Save(ctx); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Fatalf("save after the lease was lost: %v, want ErrLeaseLost", err)
	}
	res := &agent.Result{Messages: message.History{message.NewRequest(message.UserText("hi"))}}
	if err := s.Finish(ctx, res, nil); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Fatalf("finish after the lease was lost: %v, want ErrLeaseLost", err)
	}
	if _, now, err := store.Load(ctx, id); err != nil || now != rev {
		t.Fatalf("stored revision %d after the lease was lost (%v), want %d", now, err, rev)
	}
}

// answers records what a session tells its AnswerAwaiter.
type answers struct {
	mu   sync.Mutex
	sets map[string][]string
}

func (a *answers) AwaitAnswers(conv string, tasks []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sets == nil {
		a.sets = map[string][]string{}
	}
	a.sets[conv] = tasks
}

func (a *answers) of(conv string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sets[conv]
}

// The session tells the dispatcher which external calls wait for an
// answer (so that a worker's result for one is refused live): those of
// the loaded record, none once it closes.
func TestSessionTellsAnswersAwaited(t *testing.T) {
	t.Parallel()
	store := conversation.NewMemory()
	id, rec := pausedConversation(t, store, &recorder{})
	ext := taskOf(t, rec, deferred.KindExternal)
	aw := &answers{}
	s, err := session.Open(context.Background(), session.Config{Store: store, Answers: aw}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := aw.of(id); len(got) != 1 || got[0] != ext.TaskID {
		t.Fatalf("awaited %v, want [%s]", got, ext.TaskID)
	}
	s.Close()
	if got := aw.of(id); len(got) != 0 {
		t.Errorf("awaited %v after Close, want none", got)
	}
}
