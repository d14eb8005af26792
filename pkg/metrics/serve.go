package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Serve holds the metrics `agent serve` adds (SPEC §11).
type Serve struct {
	// HTTPRequestsTotal counts the API's requests:
	// offload_http_requests_total{route,code}.
	HTTPRequestsTotal *prometheus.CounterVec

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
	}
	s.all = collectors{s.HTTPRequestsTotal}
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

// Describe implements [prometheus.Collector].
func (s *Serve) Describe(ch chan<- *prometheus.Desc) { s.all.describe(ch) }

// Collect implements [prometheus.Collector].
func (s *Serve) Collect(ch chan<- prometheus.Metric) { s.all.collect(ch) }
