package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

func TestStart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.MaxPayload(2<<20))
	js := srv.JetStream(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "s.1", []byte("hi"))
	if err != nil || ack.Sequence != 1 {
		t.Fatalf("publish: %+v %v", ack, err)
	}
	if got := srv.Conn(t).MaxPayload(); got != 2<<20 {
		t.Errorf("max payload %d", got)
	}
}

func TestRestartOnSameStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	first := natstest.Start(t, natstest.StoreDir(dir))
	js := first.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	first.NATS().Shutdown()
	first.NATS().WaitForShutdown()

	second := natstest.Start(t, natstest.StoreDir(dir))
	msg, err := second.JetStream(t).Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := msg.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("messages after restart: %d", n)
	}
}

func TestServerRestartKeepsURLAndStore(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	url := srv.URL()
	reconnected := make(chan struct{}, 1)
	nc := srv.Conn(t, append(natstest.Reconnecting(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))...)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	if srv.URL() != url {
		t.Fatalf("URL changed: %s, was %s", srv.URL(), url)
	}
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the client did not reconnect")
	}
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("messages after restart: %d", n)
	}
}

func TestProxyCutAndRestore(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	proxy := natstest.NewProxy(t, srv.URL())
	disconnected := make(chan struct{}, 1)
	reconnected := make(chan struct{}, 1)
	nc := natstest.Connect(t, proxy.URL(), append(natstest.Reconnecting(20*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))...)
	direct := srv.Conn(t)
	got := make(chan string, 4)
	if _, err := nc.Subscribe("x", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	offloadtest.WaitOrTimeout(t, disconnected, "the disconnect")
	if err := direct.Publish("x", []byte("lost")); err != nil {
		t.Fatal(err)
	}
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	offloadtest.WaitOrTimeout(t, reconnected, "the reconnect")
	if err := nc.Flush(); err != nil { // the subscription is back
		t.Fatal(err)
	}
	if err := direct.Publish("x", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if m := offloadtest.WaitOrTimeout(t, got, "a message after the restore"); m != "after" {
		t.Fatalf("got %q: a message published while cut arrived", m)
	}
}

// A stalled proxy makes its clients slow readers: what the server sends
// them piles up past its max_pending, and it cuts them as slow
// consumers, which they see once the proxy resumes.
func TestProxyStall(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.MaxPayload(64<<10), natstest.MaxPending(256<<10))
	proxy := natstest.NewProxy(t, srv.URL())
	disconnected := make(chan struct{}, 1)
	nc := natstest.Connect(t, proxy.URL(), append(natstest.Reconnecting(20*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case disconnected <- struct{}{}:
			default:
			}
		}))...)
	for range 20 {
		if _, err := nc.Subscribe("x", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	proxy.Stall()
	direct := srv.Conn(t)
	for range 20 {
		if err := direct.Publish("x", make([]byte, 60<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}
	offloadtest.Eventually(t, "the server cutting a slow consumer", func() bool { // its counter: no signal outside the server's log
		return srv.NATS().NumSlowConsumersClients() > 0
	})
	proxy.Resume()
	offloadtest.WaitOrTimeout(t, disconnected, "the client cut")
}
