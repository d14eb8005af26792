package metrics_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/offload-dev/offload/pkg/metrics"
)

// touchAgent sets one series of every agent metric.
func touchAgent(a *metrics.Agent) {
	a.RunsTotal.WithLabelValues("success").Inc()
	a.ModelRequestsTotal.WithLabelValues("gpt", "ok").Inc()
	a.ModelRequestDuration.WithLabelValues("gpt").Observe(1.5)
	a.TokensTotal.WithLabelValues("gpt", metrics.DirectionInput).Add(10)
	a.ToolCallsTotal.WithLabelValues("sleep", "background", "success").Inc()
	a.PendingCalls.WithLabelValues("background").Set(2)
	a.ToolCallDuration.WithLabelValues("sleep", "background").Observe(0.2)
	a.ApprovalWait.Observe(30)
	a.Refused(metrics.RefuseLate)
	a.RegistryClash("shell", "requires_approval")
}

func touchWorker(w *metrics.Worker) {
	w.TasksTotal.WithLabelValues("sleep", "ok").Inc()
	w.TaskDuration.WithLabelValues("sleep").Observe(0.1)
	w.Inflight.WithLabelValues("sleep").Inc()
	w.RedeliveriesTotal.WithLabelValues("sleep").Inc()
	w.CancellationsTotal.WithLabelValues("sleep").Inc()
	w.ToolQueued.WithLabelValues("sleep").Set(3)
	w.ToolLimitedTotal.WithLabelValues("sleep", "rate").Inc()
	w.ToolCooldown.WithLabelValues("sleep").Set(2)
}

// family is a metric's name, type and label names, as exported.
type family struct {
	name   string
	typ    dto.MetricType
	labels string
}

func families(t *testing.T, g prometheus.Gatherer) []family {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []family
	for _, mf := range mfs {
		var labels []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		out = append(out, family{mf.GetName(), mf.GetType(), strings.Join(labels, ",")})
	}
	return out
}

func TestAgentNamesAndLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	touchAgent(metrics.NewAgent(reg))
	want := []family{ // sorted by name, as Gather returns them
		{"offload_approval_wait_seconds", dto.MetricType_HISTOGRAM, ""},
		{"offload_model_request_duration_seconds", dto.MetricType_HISTOGRAM, "model"},
		{"offload_model_requests_total", dto.MetricType_COUNTER, "model,outcome"},
		{"offload_pending_calls", dto.MetricType_GAUGE, "mode"},
		{"offload_refused_messages_total", dto.MetricType_COUNTER, "reason"},
		{"offload_registry_clashes_total", dto.MetricType_COUNTER, "field,tool"},
		{"offload_runs_total", dto.MetricType_COUNTER, "outcome"},
		{"offload_tokens_total", dto.MetricType_COUNTER, "direction,model"},
		{"offload_tool_call_duration_seconds", dto.MetricType_HISTOGRAM, "mode,tool"},
		{"offload_tool_calls_total", dto.MetricType_COUNTER, "mode,outcome,tool"},
	}
	if got := families(t, reg); !slices.Equal(got, want) {
		t.Errorf("agent metrics:\n got %v\nwant %v", got, want)
	}
}

func TestWorkerNamesAndLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	touchWorker(metrics.NewWorker(reg))
	want := []family{
		{"offload_tool_cooldown_seconds", dto.MetricType_GAUGE, "tool"},
		{"offload_tool_limited_total", dto.MetricType_COUNTER, "limit,tool"},
		{"offload_tool_queued", dto.MetricType_GAUGE, "tool"},
		{"offload_worker_cancellations_total", dto.MetricType_COUNTER, "tool"},
		{"offload_worker_inflight", dto.MetricType_GAUGE, "tool"},
		{"offload_worker_redeliveries_total", dto.MetricType_COUNTER, "tool"},
		{"offload_worker_task_duration_seconds", dto.MetricType_HISTOGRAM, "tool"},
		{"offload_worker_tasks_total", dto.MetricType_COUNTER, "status,tool"},
	}
	if got := families(t, reg); !slices.Equal(got, want) {
		t.Errorf("worker metrics:\n got %v\nwant %v", got, want)
	}
}

func TestLint(t *testing.T) {
	t.Parallel()
	a := metrics.NewAgent(nil)
	touchAgent(a)
	w := metrics.NewWorker(nil)
	touchWorker(w)
	sv := metrics.NewServe(nil)
	sv.HTTPRequest("POST /v1/conversations", 202)
	sv.Woke(3e6) // 3 ms
	for name, c := range map[string]prometheus.Collector{"agent": a, "worker": w, "serve": sv} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s: %s", name, p.Metric, p.Text)
		}
	}
}

func TestRefusedReasonsStartAtZero(t *testing.T) {
	t.Parallel()
	a := metrics.NewAgent(nil)
	if n := testutil.CollectAndCount(a.RefusedMessagesTotal); n != 13 {
		t.Fatalf("refused series = %d, want 13", n)
	}
	want := []string{"unknown_task", "duplicate", "malformed", "wrong_conversation", "wrong_kind", "oversize", "late", "wrong_tool", "wrong_attempt", "stale", "duplicate_identity", "unauthenticated", "invalid_timeout"}
	for i, r := range metrics.RefuseReasons() {
		if string(r) != want[i] {
			t.Errorf("reason %d = %q, want %q", i, r, want[i])
		}
		if v := testutil.ToFloat64(a.RefusedMessagesTotal.WithLabelValues(string(r))); v != 0 {
			t.Errorf("%s = %v, want 0", r, v)
		}
	}
	a.Refused(metrics.RefuseDuplicate)
	a.Refused(metrics.RefuseDuplicate)
	if v := testutil.ToFloat64(a.RefusedMessagesTotal.WithLabelValues("duplicate")); v != 2 {
		t.Errorf("duplicate = %v, want 2", v)
	}
}

func TestRegisterTwiceErrors(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics.NewAgent(reg)
	metrics.NewWorker(reg)

	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(metrics.NewAgent(nil)); !errors.As(err, &are) {
		t.Errorf("second agent set: err = %v, want AlreadyRegisteredError", err)
	}
	if err := reg.Register(metrics.NewWorker(nil)); !errors.As(err, &are) {
		t.Errorf("second worker set: err = %v, want AlreadyRegisteredError", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("NewAgent on a registry that has the agent set did not panic")
			}
		}()
		metrics.NewAgent(reg)
	}()

	// Agent and worker sets live side by side, and separate registries are
	// independent.
	other := prometheus.NewRegistry()
	metrics.NewAgent(other)
	metrics.NewWorker(other)
}

func TestUnregisteredSetWorks(t *testing.T) {
	t.Parallel()
	a := metrics.NewAgent(nil)
	a.RunsTotal.WithLabelValues("success").Inc()
	if v := testutil.ToFloat64(a.RunsTotal.WithLabelValues("success")); v != 1 {
		t.Fatalf("runs = %v, want 1", v)
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	w := metrics.NewWorker(reg)
	w.TasksTotal.WithLabelValues("sleep", "ok").Add(3)
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `offload_worker_tasks_total{status="ok",tool="sleep"} 3`; !strings.Contains(string(body), want) {
		t.Errorf("body misses %q:\n%s", want, body)
	}
}

func Example() {
	reg := prometheus.NewRegistry()
	m := metrics.NewWorker(reg)

	m.Inflight.WithLabelValues("research").Inc()
	m.TasksTotal.WithLabelValues("research", "ok").Inc()
	m.Inflight.WithLabelValues("research").Dec()

	fmt.Println(testutil.ToFloat64(m.TasksTotal.WithLabelValues("research", "ok")))
	// Output: 1
}
