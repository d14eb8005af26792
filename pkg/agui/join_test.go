package agui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// joined is an event of a joined stream, with its ID.
type joined struct {
	id string
	ev event
}

// join opens GET …/threads/{thread}/events on url with lastID as
// Last-Event-ID when set; it returns once the stream is open, and a
// channel of its events, closed at its end.
func join(ctx context.Context, t *testing.T, url, thread, lastID string) <-chan joined {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/agui/ops/threads/"+thread+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer viewer-token-0123456789")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // closed by the goroutine reading it, at the stream's end
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("join: %d", resp.StatusCode)
	}
	out := make(chan joined, 256)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var id string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				var ev event
				if json.Unmarshal([]byte(v), &ev) == nil {
					delete(ev, "timestamp")
					out <- joined{id: id, ev: ev}
				}
			}
		}
	}()
	return out
}

// TestJoinReconnect: a second client joins a thread another drives and
// sees its run from then on; when it reconnects (to the other replica)
// with its last event's ID it gets every event after it, none lost, none
// repeated: what it got in all is what a client reconnecting after the
// stream's first event gets.
func TestJoinReconnect(t *testing.T) {
	w := servetest.Setup(t)
	w.Stream = true
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{})
	thread := protocol.NewID()

	driven := make(chan []event, 1)
	go func() {
		evs, _, _ := post(t, srvA.URL, "operator-token-0123456789", input(thread, "r1", "slow j1"))
		driven <- evs
	}()
	offloadtest.WaitOrTimeout(t, w.SlowStarted, "the slow tool started")

	ctx, cancel := context.WithTimeout(t.Context(), servetest.Wait)
	defer cancel()
	ctx2, cut := context.WithCancel(ctx)
	part := join(ctx2, t, srvA.URL, thread, "")
	close(w.SlowGate)

	// A second client joins, reads four events live and goes.
	var first []joined
	for len(first) < 4 {
		j := offloadtest.WaitOrTimeout(t, part, "an event of the joined stream")
		first = append(first, j)
	}
	cut()
	for range part { // drained: the connection is gone
	}
	// It reconnects to the other replica with its last event's ID.
	var rest []joined
	for j := range join(ctx, t, srvB.URL, thread, first[len(first)-1].id) {
		rest = append(rest, j)
	}
	offloadtest.WaitOrTimeout(t, driven, "the driving client's run")
	// What a client reconnecting right after the first event gets: the
	// whole stream from the same start.
	all := first[:1]
	for j := range join(ctx, t, srvA.URL, thread, first[0].id) {
		all = append(all, j)
	}

	got := append(first, rest...)
	if len(all) < 8 || all[0].ev.typ() != "RUN_STARTED" || all[len(all)-1].ev.typ() != "RUN_FINISHED" {
		t.Fatalf("the joined stream: %v", all)
	}
	// The snapshots are of the store when sent: a reconnect's may be
	// newer (the run's last save read); the rest is the same event for
	// event.
	for _, js := range [][]joined{got, all} {
		for _, j := range js {
			delete(j.ev, "snapshot")
			delete(j.ev, "messages")
		}
	}
	if !reflect.DeepEqual(got, all) {
		t.Fatalf("reconnected: %d events %v\nwant %d: %v", len(got), got, len(all), all)
	}
	seen := map[string]bool{}
	for _, j := range all {
		if j.id == "" || seen[j.id] {
			t.Fatalf("event IDs: %v", all)
		}
		seen[j.id] = true
	}
	if _, code, _ := post(t, srvB.URL, "operator-token-0123456789", nil); code != http.StatusBadRequest {
		t.Fatalf("a null input: %d", code)
	}
}
