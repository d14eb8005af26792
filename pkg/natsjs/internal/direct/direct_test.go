package direct_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// A bucket's keys written and read as messages, as a bound bucket would:
// a create refused over a value and taken over a delete marker, an
// update refused at a stale revision, a deleted key not found; a stream
// that does not exist answers no direct get.
func TestKeys(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	k := direct.Keys{JS: js, NC: js.Conn(), Stream: "KV_b", Bucket: "b"}
	rev, err := k.Create(ctx, "a.1", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Create(ctx, "a.1", []byte("again")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("a second create: %v, want ErrKeyExists", err)
	}
	if v, r, err := k.Get(ctx, "a.1"); err != nil || string(v) != "one" || r != rev {
		t.Fatalf("get: %q at %d (%v), want one at %d", v, r, err, rev)
	}
	if _, err := k.Update(ctx, "a.1", []byte("two"), rev+10); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("an update at a stale revision: %v, want ErrKeyRevisionMismatch", err)
	}
	if rev, err = k.Update(ctx, "a.1", []byte("two"), rev); err != nil {
		t.Fatal(err)
	}
	// What a bound bucket reads of it.
	if e, err := kv.Get(ctx, "a.1"); err != nil || string(e.Value()) != "two" || e.Revision() != rev {
		t.Fatalf("the bucket reads %v (%v), want two at %d", e, err, rev)
	}
	if _, err := k.Delete(ctx, "a.1", rev+10); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("a delete at a stale revision: %v, want ErrKeyRevisionMismatch", err)
	}
	marker, err := k.Delete(ctx, "a.1", rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.Get(ctx, "a.1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("get of a deleted key: %v, want ErrKeyNotFound", err)
	}
	if _, err := kv.Get(ctx, "a.1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the bucket reads a deleted key: %v", err)
	}
	if rev, err = k.Create(ctx, "a.1", []byte("three")); err != nil || rev <= marker {
		t.Fatalf("a create over the delete marker at %d: %d (%v)", marker, rev, err)
	}
	if _, err := k.Put(ctx, "a.2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if m, err := direct.Last(ctx, js.Conn(), "KV_b", "$KV.b.a.2"); err != nil || m == nil || string(m.Data) != "x" || m.Deleted() {
		t.Fatalf("last of a.2: %+v (%v)", m, err)
	}
	if m, err := direct.Next(ctx, js.Conn(), "KV_b", "$KV.b.a.>", 1); err != nil || m == nil || m.Subject != "$KV.b.a.1" {
		t.Fatalf("next on a.>: %+v (%v)", m, err)
	}
	if m, err := direct.Last(ctx, js.Conn(), "KV_b", "$KV.b.none"); err != nil || m != nil {
		t.Fatalf("last of a key never written: %+v (%v), want none", m, err)
	}
	if _, err := direct.Last(ctx, js.Conn(), "NO_SUCH_STREAM", "x"); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a stream that does not exist: %v, want no responders", err)
	}
}
