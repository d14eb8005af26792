package session_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// watchedInbox is a Collector whose decision arrives when the test says:
// the test signals the watch after the first read, and the decision is
// read by the next.
type watchedInbox struct {
	mu      sync.Mutex
	signal  chan struct{}
	reads   chan struct{} // a token per read
	kinds   []conversation.ArrivalKind
	stopped bool
	send    bool // the decision is stored
	woken   bool // whether the read after the signal found it consumed
	task    string
}

func (w *watchedInbox) Collect(context.Context, *conversation.State) (int, error) { return 0, nil }

func (w *watchedInbox) CollectDecisions(_ context.Context, st *conversation.State) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads <- struct{}{}
	if !w.send {
		return 0, nil
	}
	// Woken by the signal, not by the safety tick: the signal was taken.
	w.woken = len(w.signal) == 0
	if err := st.Admit(conversation.ArrivalDecision, w.task, []byte(`{"approved":true,"by":"ann"}`), 1, time.Now(), 0); err != nil {
		return 0, err
	}
	return 1, nil
}

func (w *watchedInbox) Watch(_ context.Context, _ string, kinds ...conversation.ArrivalKind) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kinds = kinds
	return w.signal, func() {
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
	}, nil
}

// --approve wait reads the decisions when the watch signals that one was
// stored, not at the next poll, and stops the watch when done.
func TestAwaitDecisionsWakesOnWatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := conversation.NewMemory()
	id := protocol.NewID()
	if _, err := store.Save(ctx, &conversation.State{ID: id}, 0); err != nil {
		t.Fatal(err)
	}
	task := protocol.NewID()
	in := &watchedInbox{signal: make(chan struct{}, 1), reads: make(chan struct{}, 8), task: task}
	s, err := session.Open(ctx, session.Config{Store: store, Inbox: in}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	call := message.ToolCall{ToolName: "deploy", ToolCallID: "call_1", Args: `{}`}
	reqs := &deferred.Requests{Approvals: []message.ToolCall{call}, TaskIDs: map[string]string{call.ToolCallID: task}}
	type outcome struct {
		res *deferred.Results
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.AwaitDecisionsHandler(time.Minute, nil)(ctx, &tool.RunContext{RunID: protocol.NewID(), ConversationID: id}, reqs)
		done <- outcome{res, err}
	}()
	<-in.reads // the first read, after the watch began: nothing yet
	in.mu.Lock()
	in.send = true
	in.mu.Unlock()
	in.signal <- struct{}{}
	out := offloadtest.WaitOrTimeout(t, done, "the wait to end")
	if out.err != nil {
		t.Fatal(out.err)
	}
	if out.res.Approvals[call.ToolCallID] != true {
		t.Errorf("approvals %+v, want call_1 approved", out.res.Approvals)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.woken {
		t.Error("the decision was read at a poll, not when the watch signalled")
	}
	if !slices.Equal(in.kinds, []conversation.ArrivalKind{conversation.ArrivalDecision}) || !in.stopped {
		t.Errorf("watched %v, stopped %v: want the decisions watched, then the watch stopped", in.kinds, in.stopped)
	}
}
