//go:build soak

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// TestSoak is `make soak` (SPEC §5.3, issue 13): SOAK_CALLS (default 1000)
// inline calls of the built-in sleep tool over 3 toolworker replicas on the
// definitions' defaults (ack wait 10 s), while one replica is SIGKILLed and
// restarted every SOAK_KILL_EVERY (default 4s) and the nats-server is
// SIGKILLed and restarted once. It prints the calls lost and the results
// duplicated (both must be 0) and the recovery time of the tasks a killed
// replica held (from the kill to their result).
func TestSoak(t *testing.T) {
	calls := envInt(t, "SOAK_CALLS", 1000)
	killEvery := envDuration(t, "SOAK_KILL_EVERY", 4*time.Second)
	twBin, _ := binaries(t)
	ns := natstest.StartNATSServer(t, natsServerBinary(t))
	_, js := agentConn(t, ns.URL())
	const replicas = 3
	workers := make([]*proctest.Process, replicas)
	for i := range workers {
		workers[i] = startToolworker(t, twBin, ns.URL(), "soak-"+strconv.Itoa(i), "--concurrency", "4")
	}

	conv := protocol.NewID()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	began := time.Now()

	// The agent side: publish the calls at a steady rate.
	published := make(chan error, 1)
	go func() {
		rnd := rand.New(rand.NewPCG(1, 2))
		for range calls {
			task := sleepTask(conv, 0.1+0.4*rnd.Float64())
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
	for _, rs := range results {
		if len(rs) > 1 {
			dup += len(rs) - 1
		}
		key := string(rs[0].res.Status)
		if rs[0].res.ErrorType != "" {
			key += "/" + rs[0].res.ErrorType
		}
		statuses[key]++
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
		"soak: recovery after a replica kill (kill → result of each task it held): %d tasks, p50 %v, p99 %v, max %v\n"+
		"soak: nats-server restarted in %v; first result stored %v after its kill\n",
		calls, replicas, len(kills), killEvery, natsKills, elapsed.Round(time.Second),
		lost, dup, statuses,
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
	if statuses[string(protocol.StatusOK)] != calls {
		t.Errorf("not every call succeeded: %v", statuses)
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
