package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Serve holds the metrics `agent serve` adds (SPEC §11).
type Serve struct {
	// HTTPRequestsTotal counts the API's requests:
	// offload_http_requests_total{route,code}.
	HTTPRequestsTotal *prometheus.CounterVec
	// WakeSeconds observes, for each continuation a wake starts, the time
	// from the waking message's storing to the continuation's first model
	// request: offload_wake_seconds.
	WakeSeconds prometheus.Histogram

	all collectors
}

// NewServe creates the serve metrics and registers them with reg (nil:
// not registered).
func NewServe(reg prometheus.Registerer) *Serve {
	s := &Serve{
		HTTPRequestsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_http_requests_total",
			Help: "Total number of requests of agent serve's HTTP API, by route pattern and status code.",
		}, []string{"route", "code"}),
		WakeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "offload_wake_seconds",
			Help:    "Time from the storing of the message that woke a conversation to its continuation's first model request, in seconds.",
			Buckets: durationBuckets,
		}),
	}
	s.all = collectors{s.HTTPRequestsTotal, s.WakeSeconds}
	if reg != nil {
		reg.MustRegister(s)
	}
	return s
}

// HTTPRequest counts one request of route answered with code. A nil
// *Serve counts nothing.
func (s *Serve) HTTPRequest(route string, code int) {
	if s == nil {
		return
	}
	s.HTTPRequestsTotal.WithLabelValues(route, strconv.Itoa(code)).Inc()
}

// Woke observes one wake that took d. A nil *Serve observes nothing.
func (s *Serve) Woke(d time.Duration) {
	if s == nil {
		return
	}
	s.WakeSeconds.Observe(d.Seconds())
}

// Describe implements [prometheus.Collector].
func (s *Serve) Describe(ch chan<- *prometheus.Desc) { s.all.describe(ch) }

// Collect implements [prometheus.Collector].
func (s *Serve) Collect(ch chan<- prometheus.Metric) { s.all.collect(ch) }
