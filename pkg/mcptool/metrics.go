package mcptool

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the MCP metrics of SPEC §16. Build them with [NewMetrics]; a
// nil *Metrics records nothing.
type Metrics struct {
	// Calls counts MCP tool calls by server, MCP tool and outcome (ok,
	// is_error, mcp_error, timeout, server_down, cancelled, deferred,
	// error): offload_mcp_calls_total{server,tool,outcome}.
	Calls *prometheus.CounterVec
	// Restarts counts restarts of a server's connection (a stdio server's
	// process): offload_mcp_server_restarts_total{server}.
	Restarts *prometheus.CounterVec
	// Up is 1 while a server's connection is up, else 0:
	// offload_mcp_server_up{server}.
	Up *prometheus.GaugeVec
}

// NewMetrics builds the metrics and registers them with reg (none when
// nil). It panics on a conflict with metrics already registered, as
// promauto does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_mcp_calls_total",
			Help: "Total number of MCP tool calls made by this worker, by server, MCP tool and outcome.",
		}, []string{"server", "tool", "outcome"}),
		Restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offload_mcp_server_restarts_total",
			Help: "Total number of restarts of an MCP server's connection (a stdio server's process), by server.",
		}, []string{"server"}),
		Up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "offload_mcp_server_up",
			Help: "1 while the connection to an MCP server is up, else 0, by server.",
		}, []string{"server"}),
	}
	if reg != nil {
		reg.MustRegister(m.Calls, m.Restarts, m.Up)
	}
	return m
}

func (m *Metrics) call(server, tool, outcome string) {
	if m != nil {
		m.Calls.WithLabelValues(server, tool, outcome).Inc()
	}
}

func (m *Metrics) restarted(server string) {
	if m != nil {
		m.Restarts.WithLabelValues(server).Inc()
	}
}

func (m *Metrics) up(server string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.Up.WithLabelValues(server).Set(v)
}
