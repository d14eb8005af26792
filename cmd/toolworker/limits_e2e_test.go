package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A rate of 30 a minute given in --config holds across three toolworker
// replicas (SPEC §19): 40 calls offered at once, the tool itself records
// when each starts; over the minute from the first start, 30 start
// (±10 %), on whichever replica.
func TestRateAcrossToolworkers(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of wall time")
	}
	t.Parallel()
	twBin, _ := binaries(t)
	srv := natstest.Start(t)
	if err := natsjs.Provision(t.Context(), srv.JetStream(t), natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "stamp.sh"), "#!/bin/sh\ndate +%s.%N >> starts.log\necho started\n", 0o755)
	writeFile(t, filepath.Join(dir, "starts.log"), "", 0o666)
	if err := os.Chmod(filepath.Join(dir, "starts.log"), 0o666); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "tools.yaml"), `tools:
  - name: paced
    command: ["./stamp.sh"]
    idempotent: true
    limits: {rate: {limit: 30, period: 1m}}
`, 0o644)
	for _, id := range []string{"r1", "r2", "r3"} {
		startWorker(t, twBin, "--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--id", id)
	}
	_, js := agentConn(t, srv.URL())
	conv := protocol.NewID()
	for range 40 {
		task := protocol.Task{TaskID: protocol.NewID(), Tool: "paced", Args: []byte(`{}`), ConversationID: conv}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		if err := publishTask(ctx, js, task); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	starts := func() []float64 {
		data, err := os.ReadFile(filepath.Join(dir, "starts.log"))
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, l := range strings.Fields(string(data)) {
			if v, err := strconv.ParseFloat(l, 64); err == nil {
				out = append(out, v)
			}
		}
		return out
	}
	offloadtest.Eventually(t, "the first start", func() bool { return len(starts()) > 0 }) // the file is the tool's only record
	first := starts()[0]
	// The minute from the first start, and a little over it: what the
	// limit lets start by then is decided; the wait is the measurement.
	time.Sleep(time.Until(time.Unix(0, int64(first*1e9)).Add(62 * time.Second)))
	n := 0
	for _, s := range starts() {
		if s-first < 60 {
			n++
		}
	}
	if n < 27 || n > 33 {
		t.Errorf("%d calls started within the minute from the first at 30/min across 3 replicas, want 30 ± 10 %%", n)
	}
	t.Logf("%d calls started within the minute from the first (limit 30/min, 3 replicas)", n)
}
