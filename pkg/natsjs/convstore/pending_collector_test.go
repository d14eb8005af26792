package convstore_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestPendingCollector: offload_pending_calls{kind} counts the calls the
// store's pending records wait for, whichever process saved them, and
// follows them as decisions arrive; lint-clean.
func TestPendingCollector(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.store(t, convstore.Config{})
	ctx := t.Context()
	p, err := convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: b.srv.JetStream(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := convstore.NewPendingCollector(p)
	want := func(approvals int) string {
		return `
# HELP offload_pending_calls Number of deferred and background calls waiting in the store's conversations, by kind.
# TYPE offload_pending_calls gauge
offload_pending_calls{kind="approval"} ` + strconv.Itoa(approvals) + `
offload_pending_calls{kind="background"} 0
offload_pending_calls{kind="external"} 0
`
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(0))); err != nil {
		t.Fatalf("empty store: %v", err)
	}
	var states []*conversation.State
	var revs []conversation.Revision
	for range 2 {
		st := sampleState(protocol.NewID(), 1) // one approval pending
		rev, err := s.Save(ctx, st, 0)
		if err != nil {
			t.Fatal(err)
		}
		states, revs = append(states, st), append(revs, rev)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(2))); err != nil {
		t.Fatalf("two paused conversations: %v", err)
	}
	st := states[0]
	if err := st.Admit(conversation.ArrivalDecision, st.Pending.Tasks[0].TaskID, []byte(`{"approved":true}`), 1, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, st, revs[0]); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(1))); err != nil {
		t.Fatalf("one decided: %v", err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
