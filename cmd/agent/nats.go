package main

import (
	"context"

	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/embedded"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/tool"
)

// remoteTools connects to NATS and returns the toolset of the tools workers
// advertise, restricted to --tools, and a function that releases
// everything.
//
// Without --nats (or NATS_URL), it uses the embedded default (SPEC §6.4): an
// in-process nats-server storing under --store (or the one another agent
// process started on the same store), with the built-in tools served by a
// worker in this process.
func remoteTools(ctx context.Context, e env, f *runFlags, log *slog.Logger, am *metrics.Agent) (tool.Toolset, func(), error) {
	var closers []func(context.Context)
	release := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i](cctx)
		}
	}
	fail := func(err error) (tool.Toolset, func(), error) {
		release()
		return nil, nil, err
	}
	// Start-up steps are bounded; the run itself is not.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	url := f.nats
	embeddedDefault := url == ""
	var builtins []*tool.Tool
	if embeddedDefault {
		var err error
		if builtins, err = builtinTools(f, log); err != nil {
			return fail(err)
		}
		srv, err := embedded.Start(ctx, embedded.Config{StoreDir: f.store, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("embedded nats-server: %w", err))
		}
		closers = append(closers, func(ctx context.Context) { _ = srv.Shutdown(ctx) })
		url = srv.URL()
		fmt.Fprintf(e.stderr, "nats: %s\n", url)
	}
	// An agent run fails fast when the server is not there (workers wait).
	nc, err := natsjs.Connect(url, natsjs.ConnectOptions{Name: "agent", Logger: log, Extra: []nats.Option{nats.Timeout(5 * time.Second), nats.RetryOnFailedConnect(false)}})
	if err != nil {
		return fail(&exitError{code: exitFailed, err: fmt.Errorf("connect to %s: %w", url, err)})
	}
	closers = append(closers, func(context.Context) { nc.Close() })

	want := splitList(f.tools)
	if embeddedDefault {
		w, err := natsjs.NewWorker(natsjs.WorkerConfig{
			Conn:        nc,
			Prefix:      f.prefix,
			ID:          fmt.Sprintf("agent-%d", os.Getpid()),
			Tools:       builtins,
			GracePeriod: 5 * time.Second,
			Logger:      log,
		})
		if err != nil {
			return fail(err)
		}
		if err := w.Start(ctx); err != nil {
			return fail(fmt.Errorf("built-in tools worker: %w", err))
		}
		closers = append(closers, func(ctx context.Context) { _ = w.StopAndCancel(ctx) })
	}

	d, err := natsjs.NewDispatcher(natsjs.DispatcherConfig{Conn: nc, Prefix: f.prefix, Logger: log, Metrics: am})
	if err != nil {
		return fail(err)
	}
	if err := d.Start(ctx); err != nil {
		return fail(fmt.Errorf("dispatcher: %w", err))
	}
	closers = append(closers, func(ctx context.Context) { _ = d.Stop(ctx) })

	var filter []string
	if len(want) > 0 {
		filter = want
	}
	rt, err := natsjs.NewRemoteToolset(ctx, natsjs.RemoteConfig{Conn: nc, Prefix: f.prefix, Dispatcher: d, Filter: filter, Logger: log})
	if err != nil {
		return fail(fmt.Errorf("tool registry: %w", err))
	}
	closers = append(closers, func(context.Context) { rt.Close() })

	if !embeddedDefault {
		tools, _ := rt.Tools(ctx)
		if len(tools) == 0 {
			fmt.Fprintf(e.stderr, "agent: no worker advertises %s on %s yet; start toolworker replicas (the model is offered no tools)\n", describeTools(want), url)
		}
		for _, name := range want {
			if !slices.ContainsFunc(tools, func(t *tool.Tool) bool { return t.Name == name }) && len(tools) > 0 {
				fmt.Fprintf(e.stderr, "agent: no worker advertises tool %q yet\n", name)
			}
		}
	}
	return rt, release, nil
}

func describeTools(want []string) string {
	if len(want) == 0 {
		return "any tool"
	}
	return "the tools " + strings.Join(want, ", ")
}
