package pending_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/pending"
)

// TestCollector: offload_pending_calls{kind} counts the calls the store's
// pending records wait for, whichever process saved them, and follows
// them as decisions arrive; lint-clean.
func TestCollector(t *testing.T) {
	t.Parallel()
	w := newWorld(t, pending.Config{})
	ctx := t.Context()
	c := pending.NewCollector(w.desk)
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
		st, rev := w.paused(t, approval("shell", `{"cmd":"ls"}`))
		states, revs = append(states, st), append(revs, rev)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(2))); err != nil {
		t.Fatalf("two paused conversations: %v", err)
	}
	st := states[0]
	if err := st.Admit(conversation.ArrivalDecision, st.Pending.Tasks[0].TaskID, []byte(`{"approved":true}`), 1, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.Save(ctx, st, revs[0]); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want(1))); err != nil {
		t.Fatalf("one decided: %v", err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
