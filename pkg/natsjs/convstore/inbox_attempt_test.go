package convstore_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestInboxRefusesWrongAttempt: on a resume, a background task dispatched
// again (attempt 1) is answered only by its own attempt's result; one of
// attempt 0 (stored again) is refused as wrong_attempt.
func TestInboxRefusesWrongAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in, am := b.inbox(t)
	ctx := context.Background()
	conv, bg := protocol.NewID(), protocol.NewID()
	st := &conversation.State{ID: conv, Pending: &deferred.PendingRecord{ConversationID: conv, Tasks: []deferred.PendingTask{
		{TaskID: bg, Kind: deferred.KindBackground, Tool: "research", Attempt: 1},
	}}}
	s := protocol.Subjects{}
	for _, data := range []string{`{"content":"stale","attempt":0}`, `{"content":"found","attempt":1}`} {
		if _, err := b.js.Publish(ctx, s.Result(conv, bg, "research"), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := in.Collect(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || len(st.Arrivals) != 1 || string(st.Arrivals[0].Data) != `{"content":"found","attempt":1}` {
		t.Fatalf("%d arrivals %+v", n, st.Arrivals)
	}
	if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(metrics.RefuseWrongAttempt))); got != 1 {
		t.Errorf("refused{wrong_attempt} = %v, want 1", got)
	}
}
