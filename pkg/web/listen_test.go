package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/web"
)

// The server's timeouts cut slow clients, not long answers: with every
// timeout at 100 ms, a run started with ?wait=1 that lasts many times
// that answers with its final event, and an event stream open meanwhile
// gets its heartbeats and the run's events to its final one (the route
// wrapper lifts the read deadline once a request is read and keeps the
// write deadline ahead of each write).
func TestLongAnswersOutliveTheTimeouts(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	const d = 100 * time.Millisecond
	limits := web.Limits{ReadHeaderTimeout: d, ReadTimeout: d, WriteTimeout: d, IdleTimeout: d, Heartbeat: d / 2}
	_, f := r.Face(t, opToken+" operator ops\n"+viewerToken+" viewer val\n", agentproc.FaceOptions{Limits: limits})
	ctx, cancel := context.WithCancel(context.Background())
	addr, served := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		served <- web.ListenAndServe(ctx, nil, "127.0.0.1:0", f.Handler, limits, func(context.Context) error { return nil }, servetest.Wait,
			func(a net.Addr) { addr <- a })
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + offloadtest.WaitOrTimeout(t, addr, "the server listening").String()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	type answer struct {
		code int
		body map[string]any
	}
	waited := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/conversations?wait=1", strings.NewReader(`{"agent":"ops","prompt":"slow prod"}`))
		req.Header.Set("Authorization", "Bearer "+opToken)
		resp, err := client.Do(req)
		if err != nil {
			waited <- answer{code: -1, body: map[string]any{"error": err.Error()}}
			return
		}
		defer resp.Body.Close()
		var a answer
		a.code = resp.StatusCode
		_ = json.NewDecoder(resp.Body).Decode(&a.body)
		waited <- a
	}()
	offloadtest.WaitOrTimeout(t, b.SlowStarted, "the slow tool")
	var conv string
	offloadtest.Eventually(t, "the running conversation listed", func() bool {
		ids, err := r.Convs.Store.List(context.Background())
		if err != nil || len(ids) != 1 {
			return false
		}
		conv = ids[0]
		return true
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/conversations/"+conv+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := client.Do(req) //nolint:bodyclose // closed by the goroutine that reads it
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		events <- string(raw)
	}()
	// Many timeouts pass while the run waits for the tool.
	<-time.After(10 * d)
	close(b.SlowGate)
	a := offloadtest.WaitOrTimeout(t, waited, "the ?wait=1 answer")
	if a.code != http.StatusOK || a.body["type"] != "final" || a.body["status"] != "finished" {
		t.Errorf("?wait=1 after %v: %d %v, want 200 and the final event", 10*d, a.code, a.body)
	}
	stream := offloadtest.WaitOrTimeout(t, events, "the event stream's end")
	if !strings.Contains(stream, ": heartbeat") || !strings.Contains(stream, `"type":"final"`) {
		t.Errorf("the event stream, open %v, has no heartbeat or no final event:\n%s", 10*d, stream)
	}
}
