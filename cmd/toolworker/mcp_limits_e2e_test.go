package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// limits: of an mcp_servers entry hold for each of its tools across the
// worker replicas (SPEC §19): with max_in_flight 1, four calls offered at
// once to two toolworkers (each with its own stdio server, four slots
// each) run one after the other, on whichever worker; each run says when
// it started and ended on the server's clock (the same machine's). The
// limits are advertised in the tools' registry entries, an override's
// replacing the server's.
func TestMCPToolLimitsAcrossWorkers(t *testing.T) {
	t.Parallel()
	command := mcptest.ChangingToolsStdio(t)
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	if err := natsjs.Provision(t.Context(), srv.JetStream(t), natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := proctest.ToolDir(t)
	config := filepath.Join(dir, "tools.yaml")
	writeFile(t, config, fmt.Sprintf(`mcp_servers:
  - name: changing
    command: [%q, %q]
    tools: [span, echo]
    limits: {max_in_flight: 1}
    overrides:
      echo: {limits: {max_in_flight: 4}}
`, command[0], command[1]), 0o644)
	for _, id := range []string{"m1", "m2"} {
		startWorker(t, bin, "--nats", srv.URL(), "--config", config, "--id", id, "--concurrency", "4")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv, err := srv.JetStream(t).KeyValue(ctx, "tools_registry")
	if err != nil {
		t.Fatal(err)
	}
	for toolName, want := range map[string]int{"span": 1, "echo": 4} {
		e, err := kv.Get(ctx, natsjs.RegistryKey(toolName, "m1"))
		if err != nil {
			t.Fatal(err)
		}
		var entry natsjs.RegistryEntry
		if err := json.Unmarshal(e.Value(), &entry); err != nil {
			t.Fatal(err)
		}
		if entry.Limits == nil || entry.Limits.MaxInFlight != want {
			t.Errorf("registry entry of %s: limits %+v, want max_in_flight %d", toolName, entry.Limits, want)
		}
	}

	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: srv.Conn(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	type span struct {
		Start, End int64
		worker     string
	}
	out := make(chan span, 4)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			res, err := d.Call(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: "span", Args: json.RawMessage(`{"ms":300}`), ConversationID: protocol.NewID()})
			if err == nil && res.Status != protocol.StatusOK {
				err = fmt.Errorf("%s %s %s", res.Status, res.ErrorType, res.Message)
			}
			var text string
			var s span
			if err == nil {
				if err = json.Unmarshal(res.Content, &text); err == nil {
					err = json.Unmarshal([]byte(text), &s)
				}
			}
			if err != nil {
				errs <- err
				return
			}
			s.worker = res.Worker
			out <- s
		}()
	}
	var spans []span
	for range 4 {
		select {
		case s := <-out:
			spans = append(spans, s)
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal("calls not answered")
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.Start - b.Start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].Start < spans[i-1].End {
			t.Errorf("calls overlapped under max_in_flight 1: %+v then %+v", spans[i-1], spans[i])
		}
	}
}
