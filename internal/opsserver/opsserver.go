// Package opsserver serves the operational endpoints of offload's
// binaries: /metrics (Prometheus) and, for a process that says when it is
// ready, /healthz and /readyz.
package opsserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/offload-dev/offload/pkg/metrics"
)

// Start serves reg on addr/metrics and, when ready is not nil, /healthz
// (always 200) and /readyz (200 while ready reports true, else 503), until
// the returned function is called; that function waits up to 5 s for the
// requests under way. It fails when addr cannot be listened on.
func Start(addr string, reg *prometheus.Registry, ready func() bool, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr) //nolint:noctx // a listen returns at once; Start is called at startup, with no context to pass
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(reg))
	if ready != nil {
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !ready() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ready\n")
		})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	log.Info("serving metrics", slog.String("addr", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
