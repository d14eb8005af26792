package metrics

import "github.com/prometheus/client_golang/prometheus"

// Worker is a tool worker's metric set. Build it with [NewWorker]; its fields
// are safe for concurrent use. Worker is a [prometheus.Collector] of all its
// metrics.
type Worker struct {
	// TasksTotal counts finished tasks by tool and result status (ok, retry,
	// failed, error, cancelled, ...): offload_worker_tasks_total{tool,status}.
	TasksTotal *prometheus.CounterVec
	// TaskDuration observes the time a tool ran in seconds:
	// offload_worker_task_duration_seconds{tool}.
	TaskDuration *prometheus.HistogramVec
	// Inflight is the number of tasks running now:
	// offload_worker_inflight{tool}.
	Inflight *prometheus.GaugeVec
	// RedeliveriesTotal counts tasks received again after a failed delivery:
	// offload_worker_redeliveries_total{tool}.
	RedeliveriesTotal *prometheus.CounterVec
	// CancellationsTotal counts tasks cancelled by a cancel message:
	// offload_worker_cancellations_total{tool}.
	CancellationsTotal *prometheus.CounterVec
	// ToolQueued is how many calls of a tool wait in its queue, held by a
	// limit (SPEC §19), as this worker last read the tool's shared state:
	// offload_tool_queued{tool}.
	ToolQueued *prometheus.GaugeVec
	// ToolLimitedTotal counts the calls this worker held by a limit, by
	// tool and limit (max_in_flight, rate, cool_down, paused, order):
	// offload_tool_limited_total{tool,limit}.
	ToolLimitedTotal *prometheus.CounterVec
	// ToolCooldown is how many seconds of a tool's cool-down (an
	// upstream's retry_after) were left when this worker last read it:
	// offload_tool_cooldown_seconds{tool}.
	ToolCooldown *prometheus.GaugeVec

	all collectors
}

var _ prometheus.Collector = (*Worker)(nil)

// NewWorker builds the worker's metric set and registers it with reg. A nil
// reg builds a working set that is not registered. NewWorker panics if the
// metrics conflict with metrics already registered with reg (a programming
// error, as with promauto); to get an error instead, call NewWorker(nil) and
// then reg.Register.
func NewWorker(reg prometheus.Registerer) *Worker {
	w := &Worker{
		TasksTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_worker_tasks_total",
			Help: "Total number of tasks finished by this worker, by tool and result status.",
		}, []string{"tool", "status"}),
		TaskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "offload_worker_task_duration_seconds",
			Help:    "Time this worker spent running a task in seconds, by tool.",
			Buckets: durationBuckets,
		}, []string{"tool"}),
		Inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "offload_worker_inflight",
			Help: "Number of tasks this worker is running, by tool.",
		}, []string{"tool"}),
		RedeliveriesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_worker_redeliveries_total",
			Help: "Total number of tasks this worker received more than once, by tool.",
		}, []string{"tool"}),
		CancellationsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_worker_cancellations_total",
			Help: "Total number of running tasks cancelled on request, by tool.",
		}, []string{"tool"}),
		ToolQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "offload_tool_queued",
			Help: "Number of calls of a tool waiting in its queue, held by a limit, as this worker last read it.",
		}, []string{"tool"}),
		ToolLimitedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_tool_limited_total",
			Help: "Total number of calls this worker held by a limit, by tool and limit.",
		}, []string{"tool", "limit"}),
		ToolCooldown: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "offload_tool_cooldown_seconds",
			Help: "Seconds of a tool's cool-down left (an upstream's retry_after), as this worker last read it.",
		}, []string{"tool"}),
	}
	w.all = collectors{w.TasksTotal, w.TaskDuration, w.Inflight, w.RedeliveriesTotal, w.CancellationsTotal,
		w.ToolQueued, w.ToolLimitedTotal, w.ToolCooldown}
	if reg != nil {
		reg.MustRegister(w)
	}
	return w
}

// Describe implements [prometheus.Collector].
func (w *Worker) Describe(ch chan<- *prometheus.Desc) { w.all.describe(ch) }

// Collect implements [prometheus.Collector].
func (w *Worker) Collect(ch chan<- prometheus.Metric) { w.all.collect(ch) }
