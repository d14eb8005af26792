package remote_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// With PerConversation, each process receives the results of the
// conversations it runs only: a flood of results for conversation A,
// run by one dispatcher, is not delivered to the dispatcher that runs
// only B (the server's consumer info counts what each consumer
// delivered), and Unfollow ends B's reading.
func TestPerConversationResults(t *testing.T) {
	const flood = 200
	b := setup(t)
	ctx := context.Background()
	dA, _ := b.dispatcher(t, remote.DispatcherConfig{PerConversation: true})
	dB, _ := b.dispatcher(t, remote.DispatcherConfig{PerConversation: true})
	convA, convB := protocol.NewID(), protocol.NewID()
	taskA, taskB := protocol.NewID(), protocol.NewID()
	if _, err := dA.Dispatch(ctx, protocol.Task{TaskID: taskA, ConversationID: convA, Tool: "nobody", Mode: protocol.ModeBackground}); err != nil {
		t.Fatal(err)
	}
	hB, err := dB.Dispatch(ctx, protocol.Task{TaskID: taskB, ConversationID: convB, Tool: "nobody", Mode: protocol.ModeBackground})
	if err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	for i := range flood {
		task := taskA
		if i > 0 {
			task = protocol.NewID()
		}
		if _, err := b.js.Publish(ctx, s.Result(convA, task, "nobody"), []byte(`{"content":"flood"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.js.Publish(ctx, s.Result(convB, taskB, "nobody"), []byte(`{"content":"mine"}`)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	res, err := hB.Wait(wctx)
	if err != nil || string(res.Content) != `"mine"` {
		t.Fatalf("B's result: %+v, %v", res, err)
	}
	delivered := consumersOfResults(t, b)
	if got := delivered[s.ResultsFor(convB)]; got != 1 {
		t.Errorf("B's consumer delivered %d results, want 1 (consumers: %v)", got, delivered)
	}
	for filter, n := range delivered {
		if filter != s.ResultsFor(convA) && filter != s.ResultsFor(convB) {
			t.Errorf("a consumer on %s delivered %d results: not one conversation's", filter, n)
		}
	}
	dB.Unfollow(convB)
	if got, ok := consumersOfResults(t, b)[s.ResultsFor(convB)]; ok {
		t.Errorf("B's consumer still there after Unfollow (delivered %d)", got)
	}
}

// consumersOfResults returns what each consumer of the results stream
// delivered, by its filter.
func consumersOfResults(t *testing.T, b *bundle) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := b.js.Stream(ctx, "TOOLS_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	l := st.ListConsumers(ctx)
	for info := range l.Info() {
		filter := info.Config.FilterSubject
		if len(info.Config.FilterSubjects) > 0 {
			filter = fmt.Sprint(info.Config.FilterSubjects)
			if len(info.Config.FilterSubjects) == 1 {
				filter = info.Config.FilterSubjects[0]
			}
		}
		out[filter] += info.Delivered.Consumer
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
