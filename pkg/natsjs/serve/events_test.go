package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/service"
)

// watched is what a watch gave: each event's sequence and type, and how
// it ended.
type watched struct {
	seqs  []uint64
	types []string
	err   error
}

// watch watches conv on r after sequence after in a goroutine: ready is
// closed once the watch has begun, the result sent once it has ended. A
// gate, when set, holds the watch on its first event until closed.
func watch(ctx context.Context, r *servetest.Replica, conv string, after uint64, gate <-chan struct{}) (<-chan struct{}, <-chan watched) {
	ready, out := make(chan struct{}), make(chan watched, 1)
	go func() {
		var w watched
		w.err = r.Svc.Watch(ctx, conv, after, func() { close(ready) }, func(seq uint64, ev json.RawMessage) bool {
			if gate != nil && len(w.seqs) == 0 {
				<-gate
			}
			var head struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(ev, &head)
			w.seqs, w.types = append(w.seqs, seq), append(w.types, head.Type)
			return true
		})
		out <- w
	}()
	return ready, out
}

// consumers returns how many consumers the events stream has.
func consumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	s, err := js.Stream(t.Context(), "TOOLS_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// stored returns the sequences and types of every event of conv in the
// events stream.
func stored(t *testing.T, js jetstream.JetStream, conv string) ([]uint64, []string) {
	t.Helper()
	s, err := js.Stream(t.Context(), "TOOLS_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var types []string
	for seq := uint64(1); ; seq++ {
		m, err := s.GetMsg(t.Context(), seq, jetstream.WithGetMsgSubject("tools.event."+conv))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return seqs, types
		}
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(m.Data, &head)
		seqs, types, seq = append(seqs, m.Sequence), append(types, head.Type), m.Sequence
	}
}

// The attack of issue 37 (one viewer breaks everyone's live views): each
// watch of a conversation created a consumer of the events stream, left
// on the server for minutes after its viewer went. A replica reads a
// conversation's events with one consumer however many watch it (twenty
// here, ten on each of two replicas: two consumers), fanned out in the
// process; a watch resuming after an event (Last-Event-ID) reads what was
// stored since with direct gets, then follows; a watcher that does not
// read holds no other back; the consumer is deleted when the last
// watcher goes; a replica that stops ends its watches (ErrClosed).
func TestWatchesShareOneConsumerPerReplica(t *testing.T) {
	b := servetest.Setup(t)
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
	defer cancel()
	run, err := r1.Svc.StartConversation(ctx, "ops", "slow prod", "")
	if err != nil {
		t.Fatal(err)
	}
	conv := run.ConversationID
	offloadtest.WaitOrTimeout(t, b.SlowStarted, "the slow tool")
	// The events before the tool ran, stored (published without waiting
	// for their acknowledgements: polled).
	var first uint64
	offloadtest.Eventually(t, "the run's first events stored", func() error {
		seqs, types := stored(t, r1.JS, conv)
		if !slices.Contains(types, "tool_call") {
			return fmt.Errorf("stored: %v", types)
		}
		first = seqs[0]
		return nil
	})
	gate := make(chan struct{})
	var readies []<-chan struct{}
	var live, resumed []<-chan watched
	var stuck <-chan watched
	for i := range 10 {
		var g chan struct{}
		if i == 0 {
			g = gate // a watcher that does not read
		}
		ready, out := watch(ctx, r1, conv, 0, g)
		readies = append(readies, ready)
		if i == 0 {
			stuck = out
		} else {
			live = append(live, out)
		}
		ready, out = watch(ctx, r2, conv, first, nil)
		readies, resumed = append(readies, ready), append(resumed, out)
	}
	for _, ready := range readies {
		offloadtest.WaitOrTimeout(t, ready, "a watch begun")
	}
	if n := consumers(t, r1.JS); n != 2 {
		t.Errorf("%d consumers of the events stream for 20 watches on 2 replicas, want 2", n)
	}
	close(b.SlowGate)
	<-run.Done()
	seqs, types := stored(t, r1.JS, conv)
	if types[len(types)-1] != "final" {
		t.Fatalf("stored events %v do not end with final", types)
	}
	for i, out := range resumed {
		w := offloadtest.WaitOrTimeout(t, out, "a resumed watch's end")
		if w.err != nil || !slices.Equal(w.seqs, seqs[1:]) {
			t.Errorf("resumed watch %d: %v %v (%v), want %v %v", i, w.seqs, w.types, w.err, seqs[1:], types[1:])
		}
	}
	for i, out := range live {
		w := offloadtest.WaitOrTimeout(t, out, "a live watch's end")
		if w.err != nil || len(w.types) == 0 || w.types[len(w.types)-1] != "final" || !slices.IsSorted(w.seqs) {
			t.Errorf("live watch %d: %v %v (%v)", i, w.seqs, w.types, w.err)
		}
	}
	// The watcher held on its first event meanwhile gets the rest once
	// it reads.
	close(gate)
	if w := offloadtest.WaitOrTimeout(t, stuck, "the held watch's end"); w.err != nil || w.types[len(w.types)-1] != "final" {
		t.Errorf("the held watch: %v %v (%v)", w.seqs, w.types, w.err)
	}
	if n := consumers(t, r1.JS); n != 0 {
		t.Errorf("%d consumers of the events stream once every watcher went, want 0", n)
	}
	// A replica that stops ends the watches it serves.
	ready, out := watch(context.Background(), r2, conv, 0, nil)
	offloadtest.WaitOrTimeout(t, ready, "a watch begun")
	var wg sync.WaitGroup
	wg.Go(func() { r2.Close(t) })
	if w := offloadtest.WaitOrTimeout(t, out, "the watch's end at the replica's stop"); !errors.Is(w.err, service.ErrClosed) {
		t.Errorf("a watch at the replica's stop ended with %v, want ErrClosed", w.err)
	}
	wg.Wait()
	if err := r2.Svc.Watch(ctx, conv, 0, nil, func(uint64, json.RawMessage) bool { return true }); !errors.Is(err, service.ErrClosed) {
		t.Errorf("a watch of a stopped replica: %v, want ErrClosed", err)
	}
}
