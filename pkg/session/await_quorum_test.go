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

// votesInbox is a Collector whose decisions the test queues: each read
// admits those queued since the last (trusting their by as the
// identity, as agent serve --trust-nats-by), refusals left out as the
// real inbox does, then sends a token on reads.
type votesInbox struct {
	mu     sync.Mutex
	task   string
	queued []string // decisions not read yet
	seq    uint64
	signal chan struct{}
	reads  chan struct{}
}

func (v *votesInbox) Collect(context.Context, *conversation.State) (int, error) { return 0, nil }

func (v *votesInbox) CollectDecisions(_ context.Context, st *conversation.State) (int, error) {
	v.mu.Lock()
	defer func() {
		v.mu.Unlock()
		v.reads <- struct{}{}
	}()
	n := 0
	for _, d := range v.queued {
		v.seq++
		if st.AdmitWith(conversation.ArrivalDecision, v.task, []byte(d), conversation.AdmitOptions{Seq: v.seq, At: time.Now(), Identify: conversation.TrustBy}) == nil {
			n++
		}
		st.Checkpoint.Decisions = v.seq
	}
	v.queued = nil
	return n, nil
}

func (v *votesInbox) Watch(context.Context, string, ...conversation.ArrivalKind) (<-chan struct{}, func(), error) {
	return v.signal, func() {}, nil
}

// queue stores decision d and signals the watch.
func (v *votesInbox) queue(d string) {
	v.mu.Lock()
	v.queued = append(v.queued, d)
	v.mu.Unlock()
	select {
	case v.signal <- struct{}{}:
	default:
	}
}

// --approve wait with approval {required: 2} (SPEC §12, Config.Quorum):
// the inline wait counts the approvals as a continuation does. One
// approver's does not end the wait (nor does the same identity again);
// a second identity's approves the call. A wait that ends (suspended)
// with one approval counted keeps it in the session's state, with the
// call's required, for the run that continues the conversation.
func TestAwaitDecisionsQuorum(t *testing.T) {
	t.Parallel()
	for _, suspendAfterOne := range []bool{false, true} {
		ctx := context.Background()
		store := conversation.NewMemory()
		id := protocol.NewID()
		if _, err := store.Save(ctx, &conversation.State{ID: id}, 0); err != nil {
			t.Fatal(err)
		}
		task := protocol.NewID()
		in := &votesInbox{task: task, signal: make(chan struct{}, 1), reads: make(chan struct{}, 8)}
		quorum := func(_ context.Context, name string) int {
			if name == "deploy" {
				return 2
			}
			return 0
		}
		s, err := session.Open(ctx, session.Config{Store: store, Inbox: in, Quorum: quorum}, id, false)
		if err != nil {
			t.Fatal(err)
		}
		call := message.ToolCall{ToolName: "deploy", ToolCallID: "call_1", Args: `{}`}
		reqs := &deferred.Requests{Approvals: []message.ToolCall{call}, TaskIDs: map[string]string{call.ToolCallID: task}}
		type outcome struct {
			res *deferred.Results
			err error
		}
		done := make(chan outcome, 1)
		suspend := make(chan struct{})
		go func() {
			res, err := s.AwaitDecisionsHandler(time.Minute, suspend)(ctx, &tool.RunContext{RunID: protocol.NewID(), ConversationID: id}, reqs)
			done <- outcome{res, err}
		}()
		offloadtest.WaitOrTimeout(t, in.reads, "the first read") // nothing yet
		in.queue(`{"approved":true,"by":"ann"}`)
		offloadtest.WaitOrTimeout(t, in.reads, "ann's approval read")
		in.queue(`{"approved":true,"by":"ann"}`)
		offloadtest.WaitOrTimeout(t, in.reads, "ann's second approval read (the wait goes on with one approver)")
		if suspendAfterOne {
			close(suspend)
			out := offloadtest.WaitOrTimeout(t, done, "the suspended wait to end")
			if out.err != nil || out.res.Approvals[call.ToolCallID] != nil {
				t.Fatalf("suspended with one approver: %+v, %v; want the call undecided", out.res, out.err)
			}
			var by []string
			for _, v := range s.State().VotesFor(task) {
				by = append(by, v.By)
			}
			if !slices.Equal(by, []string{"ann"}) {
				t.Errorf("votes kept %v, want [ann]", by)
			}
			s.Close()
			continue
		}
		in.queue(`{"approved":true,"by":"bob"}`)
		out := offloadtest.WaitOrTimeout(t, done, "the wait to end")
		if out.err != nil || out.res.Approvals[call.ToolCallID] != true {
			t.Fatalf("after ann and bob: %+v, %v; want call_1 approved", out.res, out.err)
		}
		select {
		case <-in.reads: // bob's read
		default:
			t.Error("the wait ended before bob's approval was read")
		}
		s.Close()
	}
}
