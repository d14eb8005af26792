package remote_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestDispatcherRefusesEvictedResults checks, through the wire, that tasks
// evicted from the dispatcher's exact memory by its count limit are still
// refused (as duplicates, by the time in their ULID), that their workers'
// cancelled confirmations are not, and that forged task IDs older than the
// window or in the future are unknown_task.
func TestDispatcherRefusesEvictedResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := make(refusals, 16)
	d, am := b.dispatcher(t, remote.DispatcherConfig{Logger: slog.New(refused)})
	const limit = 8
	remote.LimitDone(d, limit)

	ctx := context.Background()
	s := protocol.Subjects{}
	pub := func(conv, task, data string) {
		t.Helper()
		if err := b.nc.Publish(s.Result(conv, task, "job"), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	conv := protocol.NewID()
	// 4·limit calls answered one after the other (no worker serves
	// "job": the test answers).
	var tasks []string
	for range 4 * limit {
		h, err := d.Dispatch(ctx, jstest.NewTask("job", conv, `{}`))
		if err != nil {
			t.Fatal(err)
		}
		pub(conv, h.Task().TaskID, `{"content":"ok"}`)
		offloadtest.WaitOrTimeout(t, h.Done(), "a call's result")
		if _, err := h.Result(); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, h.Task().TaskID)
	}
	first, last := tasks[0], tasks[len(tasks)-1]
	if remote.RemembersExactly(d, first) || !remote.RemembersExactly(d, last) {
		t.Fatalf("exact memory: first %v, last %v; want the first evicted, the last kept",
			remote.RemembersExactly(d, first), remote.RemembersExactly(d, last))
	}

	expectN := func(reason metrics.RefuseReason, n float64) {
		t.Helper()
		if got := offloadtest.WaitOrTimeout(t, refused, "a refusal"); got != string(reason) {
			t.Fatalf("refused for %q, want %q", got, reason)
		}
		if got := testutil.ToFloat64(am.RefusedMessagesTotal.WithLabelValues(string(reason))); got != n {
			t.Fatalf("refused{%s} = %v, want %v", reason, got, n)
		}
	}
	pub(conv, last, `{"content":"again"}`)
	expectN(metrics.RefuseDuplicate, 1) // exact
	pub(conv, first, `{"content":"again"}`)
	expectN(metrics.RefuseDuplicate, 2) // evicted: by its ULID time
	// A worker's cancelled confirmation of an evicted task is not refused;
	// the next refusal is the forged ID's.
	pub(conv, tasks[1], `{"status":"cancelled"}`)
	old := ulid.MustNew(ulid.Timestamp(time.Now().Add(-remote.DefaultDedupWindow-time.Minute)), rand.Reader).String()
	pub(conv, old, `{"content":"forged"}`)
	expectN(metrics.RefuseUnknownTask, 1)
	future := ulid.MustNew(ulid.Timestamp(time.Now().Add(time.Hour)), rand.Reader).String()
	pub(conv, future, `{"content":"forged"}`)
	expectN(metrics.RefuseUnknownTask, 2)
	// Another process's conversation: ignored, even for an evicted task.
	pub(protocol.NewID(), first, `{"content":"not mine"}`)
	pub(conv, tasks[2], `{"content":"again"}`)
	expectN(metrics.RefuseDuplicate, 3)
	if d.Pending() != 0 {
		t.Errorf("%d calls pending", d.Pending())
	}
}
