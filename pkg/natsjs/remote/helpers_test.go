package remote_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
)

// wait bounds every wait on a signal in these tests.
const wait = jstest.Wait

// bundle is what every test of the agent side starts from (setup): an
// in-process server, a connection of the test's own and a JetStream
// context on it. Dispatchers, toolsets, clients and workers, each on its
// own connection, the test asks the bundle for, configured as it needs
// them.
type bundle struct {
	srv *natstest.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

// setup starts a server with opts, stopped when the test ends.
func setup(t *testing.T, opts ...natstest.Option) *bundle {
	t.Helper()
	srv := natstest.Start(t, opts...)
	nc := srv.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{srv: srv, nc: nc, js: js}
}

// results subscribes (core) to every result of the default prefix.
func (b *bundle) results(t *testing.T) <-chan protocol.Result {
	t.Helper()
	return jstest.SubscribeResults(t, b.nc)
}

// dispatcher starts a dispatcher (on its own connection unless cfg has
// one), stopped when the test ends.
func (b *bundle) dispatcher(t *testing.T, cfg remote.DispatcherConfig) (*remote.Dispatcher, *metrics.Agent) {
	t.Helper()
	return jstest.StartDispatcher(t, b.srv, cfg)
}

// worker starts a worker on its own connection, stopped when the test
// ends.
func (b *bundle) worker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	return jstest.StartWorker(t, b.srv, cfg)
}

// toolset starts a toolset of d (with filter, nil for every tool) on its
// own connection, stopped when the test ends.
func (b *bundle) toolset(t *testing.T, d *remote.Dispatcher, filter []string) *remote.Toolset {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := remote.NewToolset(remote.ToolsetConfig{Conn: b.srv.Conn(t), Dispatcher: d, Filter: filter, Logger: jstest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// client starts a client on its own connection (unless cfg has one),
// stopped at the end of the test.
func (b *bundle) client(t *testing.T, cfg remote.ClientConfig) *remote.Client {
	t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = b.srv.Conn(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = jstest.Logger().With("test", t.Name())
	}
	c, err := remote.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop client: %v", err)
		}
	})
	return c
}

// registry returns the tool registry's bucket.
func (b *bundle) registry(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := b.js.KeyValue(context.Background(), "tools_registry")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// taskTap subscribes (core) to the tasks of toolName: a published task
// arrives on the channel with its Nats-Msg-Id.
func (b *bundle) taskTap(t *testing.T, toolName string) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 8)
	sub, err := b.nc.ChanSubscribe("tools.task."+toolName, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

func toolNames(t *testing.T, r *remote.Toolset) []string {
	t.Helper()
	tools, err := r.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range tools {
		names = append(names, x.Name)
	}
	return names
}

// waitTools waits, on the toolset's change signal, until its tool names are
// want.
func waitTools(t *testing.T, r *remote.Toolset, want ...string) {
	t.Helper()
	deadline := time.After(wait)
	for {
		changed := r.Changed()
		if got := toolNames(t, r); slices.Equal(got, want) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("tools %v, want %v", toolNames(t, r), want)
		}
	}
}
