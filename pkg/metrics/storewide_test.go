package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload/pkg/metrics"
)

// storePending stands for the store-wide gauge agent serve registers
// (convstore.PendingCollector): offload_pending_calls{kind}.
var storePending = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "offload_pending_calls", Help: "Calls waiting in the store, by kind."}, []string{"kind"})

// The agent's set built with StoreWidePending leaves its per-process
// offload_pending_calls{mode} out, so that the store-wide {kind} gauge
// registers beside it in one registry (which NewAgent's set refuses); the
// gauge it keeps still works, unexported.
func TestStoreWidePendingRegistersBesideTheAgent(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewAgent(nil))
	if err := reg.Register(storePending); err == nil {
		t.Fatal("{kind} registered beside the per-process {mode}: want the clash this option avoids")
	}

	reg = prometheus.NewRegistry()
	a := metrics.NewAgentWith(reg, metrics.AgentOptions{StoreWidePending: true})
	if err := reg.Register(storePending); err != nil {
		t.Fatalf("the store-wide gauge beside the agent's set: %v", err)
	}
	touchAgent(a) // writes PendingCalls{mode}, kept unexported
	storePending.WithLabelValues("approval").Set(3)
	want := "# HELP offload_pending_calls Calls waiting in the store, by kind.\n# TYPE offload_pending_calls gauge\noffload_pending_calls{kind=\"approval\"} 3\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "offload_pending_calls"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}
