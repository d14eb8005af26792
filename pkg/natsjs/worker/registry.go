package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
)

// writeRegistry writes (or refreshes) the registry entry of every tool.
func (w *Worker) writeRegistry(ctx context.Context) error {
	w.regMu.Lock() // not one of a tool retired meanwhile
	defer w.regMu.Unlock()
	expires := time.Now().Add(natsjs.RegistryTTL)
	parts := *w.parts.Load()
	for _, name := range w.toolNames() {
		if err := w.writeEntry(ctx, parts[name].tool.Load(), expires); err != nil {
			return err
		}
	}
	return nil
}

// refreshRegistry rewrites the registry entries every RegistryRefresh until
// the worker stops.
func (w *Worker) refreshRegistry() {
	defer w.periodic.Done()
	tick := time.NewTicker(w.cfg.RegistryRefresh)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if !w.cfg.Conn.IsConnected() {
				continue // the next tick after a reconnect refreshes them
			}
			// A stop cuts the write short: the worker is going anyway.
			ctx, cancel := context.WithTimeout(context.Background(), jsop.Timeout)
			go func() { // ends with the write
				select {
				case <-w.bgStop:
					cancel()
				case <-ctx.Done():
				}
			}()
			if err := w.writeRegistry(ctx); err != nil {
				w.log.Warn("registry refresh failed", slog.Any("error", err))
			}
			cancel()
		case <-w.bgStop:
			return
		}
	}
}

// deleteRegistry removes the worker's registry entries.
func (w *Worker) deleteRegistry(ctx context.Context) {
	if !w.cfg.Conn.IsConnected() {
		return // the entries expire with their TTL
	}
	w.regMu.Lock()
	defer w.regMu.Unlock()
	for _, name := range w.toolNames() {
		w.deleteEntry(ctx, name)
	}
}
