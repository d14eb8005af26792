package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
)

// writeRegistry writes (or refreshes) the registry entry of every tool.
func (w *Worker) writeRegistry(ctx context.Context) error {
	expires := time.Now().Add(natsjs.RegistryTTL)
	for _, name := range w.toolNames() {
		data, err := json.Marshal(natsjs.NewRegistryEntry(w.tools[name], w.cfg.ID, expires))
		if err != nil {
			return fmt.Errorf("natsjs: worker: registry entry of %s: %w", name, err)
		}
		if _, err := w.registry.Put(ctx, natsjs.RegistryKey(name, w.cfg.ID), data); err != nil {
			return fmt.Errorf("natsjs: worker: write registry entry of %s: %w", name, err)
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jsop.Timeout)
	defer cancel()
	for name := range w.tools {
		if _, err := w.registry.Delete(ctx, natsjs.RegistryKey(name, w.cfg.ID), 0); err != nil {
			w.log.Warn("registry entry not deleted", slog.String("tool", name), slog.Any("error", err))
		}
	}
}
