//go:build soak

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// soakScript is the soak's command tool: it counts its own executions
// (a line with its task ID in runs-<tool>.log, appended before it sleeps
// the seconds of its arguments), so that the soak sees every execution,
// also one a SIGKILL interrupted.
const soakScript = `#!/bin/sh
read -r args
echo "$OFFLOAD_TASK_ID" >> "$(dirname "$0")/runs-$1.log"
sleep "$(printf '%s' "$args" | tr -dc '0-9.')"
echo done
`

// soakTools writes the soak's tools: count_idem (idempotent: true) and
// count_once (not idempotent), both soakScript.
func soakTools(t *testing.T) (config, dir string) {
	t.Helper()
	dir = proctest.ToolDir(t)
	writeFile(t, filepath.Join(dir, "count.sh"), soakScript, 0o755)
	var b strings.Builder
	b.WriteString("tools:\n")
	for _, tl := range []struct {
		name       string
		idempotent bool
	}{{soakIdem, true}, {soakOnce, false}} {
		fmt.Fprintf(&b, `  - name: %s
    description: Counts its executions, then sleeps.
    command: ["./count.sh", "%s"]
    timeout: 1m
    idempotent: %v
    parameters: {type: object, properties: {seconds: {type: number}}, required: [seconds]}
`, tl.name, tl.name, tl.idempotent)
	}
	config = filepath.Join(dir, "tools.yaml")
	writeFile(t, config, b.String(), 0o644)
	return config, dir
}

// The soak's tools.
const (
	soakIdem = "count_idem"
	soakOnce = "count_once"
)

// executions reads runs-<tool>.log: how many times each task ran.
func executions(t *testing.T, dir, toolName string) map[string]int {
	t.Helper()
	out := map[string]int{}
	data, err := os.ReadFile(filepath.Join(dir, "runs-"+toolName+".log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, id := range strings.Fields(string(data)) {
		out[id]++
	}
	return out
}

// TestSoak is `make soak` (SPEC §5.3, §13, issues 13 and 28): SOAK_CALLS
// (default 1000) inline calls of two command tools that count their own
// executions, half of them idempotent (count_idem), half not (count_once),
// over 3 toolworker replicas on the definitions' defaults (ack wait 10 s),
// while one replica is SIGKILLed and restarted every SOAK_KILL_EVERY
// (default 4s) and the nats-server is SIGKILLed and restarted once. It
// prints the calls lost and the results duplicated (both must be 0), the
// executions per task of each tool (a non-idempotent one runs at most
// once), the ambiguous calls surfaced (approval_required with
// offload.effect unknown, count_once only) and the recovery time of the
// tasks a killed replica held (from the kill to their result).
func TestSoak(t *testing.T) {
	calls := envInt(t, "SOAK_CALLS", 1000)
	killEvery := envDuration(t, "SOAK_KILL_EVERY", 4*time.Second)
	twBin, _ := binaries(t)
	config, toolDir := soakTools(t)
	ns := natstest.StartNATSServer(t, natsServerBinary(t))
	_, js := agentConn(t, ns.URL())
	const replicas = 3
	workers := make([]*proctest.Process, replicas)
	for i := range workers {
		workers[i] = proctest.StartProcess(t, twBin, "--nats", ns.URL(), "--config", config, "--id", "soak-"+strconv.Itoa(i), "-v", "--concurrency", "4")
		workers[i].WaitLog(t, `"msg":"toolworker started"`, 60*time.Second)
	}
	toolOf := map[string]string{}

	conv := protocol.NewID()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	began := time.Now()

	// The agent side: publish the calls at a steady rate.
	published := make(chan error, 1)
	go func() {
		rnd := rand.New(rand.NewPCG(1, 2))
		for i := range calls {
			task := sleepTask(conv, 0.1+0.4*rnd.Float64())
			task.Tool = soakIdem
			if i%2 == 1 {
				task.Tool = soakOnce
			}
			toolOf[task.TaskID] = task.Tool
			if err := publishTask(ctx, js, task); err != nil {
				published <- err
				return
			}
			time.Sleep(40 * time.Millisecond) // the call rate, not a wait for a signal
		}
		published <- nil
	}()

	// The faults: a replica SIGKILLed and restarted every killEvery; the
	// nats-server SIGKILLed and restarted once, at the third tick.
	type kill struct {
		at    time.Time
		held  []string // tasks the killed incarnation had started
		label string
	}
	var kills []kill
	var natsKilled time.Time
	var natsRestart time.Duration
	natsKills := 0
	tick := time.NewTicker(killEvery)
	defer tick.Stop()
	publishing := true
	for i := 0; publishing; i++ {
		select {
		case err := <-published:
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			publishing = false
			continue
		case <-tick.C:
		}
		if i == 2 {
			natsKilled = time.Now()
			natsKills++
			ns.Kill()
			ns.Restart(t)
			natsRestart = time.Since(natsKilled)
			continue
		}
		w := workers[i%replicas]
		held := startedTasks(w.Lines())
		at := time.Now()
		w.Kill()
		kills = append(kills, kill{at: at, held: held, label: fmt.Sprintf("soak-%d", i%replicas)})
		w.Restart(t)
		w.WaitLog(t, `"msg":"toolworker started"`, 2*time.Minute)
	}
	awaitResults(t, js, conv, calls, 5*time.Minute)
	elapsed := time.Since(began)
	results := readResults(t, js, conv)

	lost := calls - len(results)
	dup := 0
	statuses := map[string]int{}
	unknown := map[string]int{} // per tool: calls answered as an unknown effect
	for id, rs := range results {
		if len(rs) > 1 {
			dup += len(rs) - 1
		}
		key := string(rs[0].res.Status)
		if rs[0].res.ErrorType != "" {
			key += "/" + rs[0].res.ErrorType
		}
		if rs[0].res.Status == protocol.StatusApprovalRequired && rs[0].res.Metadata["offload.effect"] == "unknown" {
			key += "/unknown-effect"
			unknown[toolOf[id]]++
		}
		statuses[key]++
	}
	// Executions per task, by tool: how many tasks ran 0, 1, 2, … times.
	runsOf := map[string]map[string]int{soakIdem: executions(t, toolDir, soakIdem), soakOnce: executions(t, toolDir, soakOnce)}
	hist := map[string]map[int]int{soakIdem: {}, soakOnce: {}}
	for id, name := range toolOf {
		hist[name][runsOf[name][id]]++
	}
	// A count_once call answered ok must have run once; one surfaced as
	// unknown at most once (its worker may have died before the command
	// started); none twice.
	var onceTwice, okNotRun int
	for id, name := range toolOf {
		n := runsOf[name][id]
		if name == soakOnce && n > 1 {
			onceTwice++
		}
		if rs, ok := results[id]; ok && rs[0].res.Status == protocol.StatusOK && n == 0 {
			okNotRun++
		}
	}
	var recovery []time.Duration
	for _, k := range kills {
		for _, id := range k.held {
			rs, ok := results[id]
			if !ok || !rs[0].at.After(k.at) {
				continue // finished before the kill
			}
			recovery = append(recovery, rs[0].at.Sub(k.at))
		}
	}
	slices.Sort(recovery)
	// After the server's kill: the first result stored once it was back.
	var natsRecovery time.Duration
	for _, rs := range results {
		if natsKilled.IsZero() {
			break
		}
		if d := rs[0].at.Sub(natsKilled); rs[0].at.After(natsKilled) && (natsRecovery == 0 || d < natsRecovery) {
			natsRecovery = d
		}
	}
	report := fmt.Sprintf("soak: %d calls, %d replicas (concurrency 4, ack wait 10 s), %d replica SIGKILLs (every %v), %d nats-server SIGKILL, %v\n"+
		"soak: calls lost %d, results duplicated %d, outcomes %v\n"+
		"soak: executions per task (executions: tasks): %s (idempotent) %v, %s (not idempotent) %v\n"+
		"soak: ambiguous calls surfaced to a person (offload.effect unknown): %s %d, %s %d; %s tasks run twice %d\n"+
		"soak: recovery after a replica kill (kill → result of each task it held): %d tasks, p50 %v, p99 %v, max %v\n"+
		"soak: nats-server restarted in %v; first result stored %v after its kill\n",
		calls, replicas, len(kills), killEvery, natsKills, elapsed.Round(time.Second),
		lost, dup, statuses,
		soakIdem, hist[soakIdem], soakOnce, hist[soakOnce],
		soakOnce, unknown[soakOnce], soakIdem, unknown[soakIdem], soakOnce, onceTwice,
		len(recovery), pct(recovery, 50), pct(recovery, 99), pct(recovery, 100),
		natsRestart.Round(time.Millisecond), natsRecovery.Round(time.Millisecond))
	fmt.Print(report)
	t.Log("\n" + report)
	if natsKills == 0 {
		t.Errorf("the run ended before the nats-server was killed: give more SOAK_CALLS or a shorter SOAK_KILL_EVERY")
	}
	if lost != 0 || dup != 0 {
		t.Fatalf("lost %d, duplicated %d", lost, dup)
	}
	if onceTwice != 0 || unknown[soakIdem] != 0 || okNotRun != 0 {
		t.Errorf("%s tasks run twice %d (want 0), %s calls surfaced as unknown %d (want 0), ok results of tasks that never ran %d (want 0)",
			soakOnce, onceTwice, soakIdem, unknown[soakIdem], okNotRun)
	}
	if statuses[string(protocol.StatusOK)]+unknown[soakOnce] != calls {
		t.Errorf("not every call succeeded or reached a person: %v", statuses)
	}
}

// startedTasks returns the tasks a toolworker's log (-v) says it started.
func startedTasks(lines []string) []string {
	var out []string
	for _, l := range lines {
		if !strings.Contains(l, `"msg":"task started"`) {
			continue
		}
		var rec struct {
			TaskID string `json:"task_id"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.TaskID != "" {
			out = append(out, rec.TaskID)
		}
	}
	return out
}

// pct returns the p-th percentile of sorted durations.
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return sorted[i-1].Round(10 * time.Millisecond)
}

func envInt(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	return def
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return d
	}
	return def
}
