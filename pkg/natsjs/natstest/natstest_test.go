package natstest_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
