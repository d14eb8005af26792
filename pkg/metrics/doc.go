// Package metrics defines offload's Prometheus metrics (SPEC §7): the
// [Agent] set and the [Worker] set.
//
// There are no package-level metrics and nothing is registered with the
// default registry: each set is built against a registerer the caller
// injects. Build a set once per process (or per test) and share it:
//
//	reg := prometheus.NewRegistry()
//	m := metrics.NewAgent(reg)
//	m.RunsTotal.WithLabelValues("success").Inc()
//	http.Handle("/metrics", metrics.Handler(reg))
//
// NewAgent(nil) and NewWorker(nil) build working, unregistered sets (for
// tests and for callers who do not export metrics). Each set is itself a
// [prometheus.Collector], so an unregistered set can be registered later
// with reg.Register, which reports conflicts as errors.
package metrics
