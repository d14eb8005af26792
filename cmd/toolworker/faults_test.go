package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
)

// onceSlowScript sleeps 30 s the first time it runs (it leaves a mark), and
// answers at once the next time.
const onceSlowScript = `#!/bin/sh
mark="$(dirname "$0")/ran-once"
if [ -f "$mark" ]; then echo "finished by $PPID"; exit 0; fi
: > "$mark"
echo "$PPID" > "$(dirname "$0")/started.fifo"
sleep 30
echo "slept"
`

// SIGTERM to a toolworker running a 30 s task with --grace 1s hands the task
// back before the connection closes (a nak, which the server's advisory
// shows): another replica finishes it, well within the ack wait (a figure
// asserted under -tags soak).
func TestSIGTERMHandsRunningTaskBack(t *testing.T) {
	t.Parallel()
	twBin, _ := binaries(t)
	srv := natstest.Start(t)
	dir, fifo := slowTool(t, onceSlowScript, "Sleeps 30 s the first time.")
	const ackWait = 10 * time.Second
	args := []string{"--nats", srv.URL(), "--config", filepath.Join(dir, "tools.yaml"), "--ack-wait", ackWait.String(), "--grace", "1s"}
	first := startWorker(t, twBin, append(args, "--id", "first")...)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := callSlow(ctx, t, srv)
	started := make(chan struct{})
	go func() {
		f, err := os.Open(fifo)
		if err == nil {
			buf := make([]byte, 64)
			_, _ = f.Read(buf)
			_ = f.Close()
		}
		close(started)
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the task never started")
	}
	startWorker(t, twBin, append(args, "--id", "second")...)
	naked := make(chan struct{}, 4) // the server's advisory of a nak: the hand-back
	nc := srv.Conn(t)
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.TOOLS_TASKS.task_slow", func(*nats.Msg) {
		select {
		case naked <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	term := time.Now()
	if err := first.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Handed back, not left to the ack wait: the first worker naks the
	// task, and the second one finishes it.
	offloadtest.WaitOrTimeout(t, naked, "the first worker to hand the task back (nak)")
	r := offloadtest.WaitOrTimeout(t, done, "the result from the other replica")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Status != protocol.StatusOK || r.res.Worker != "second" {
		t.Fatalf("result %+v", r.res)
	}
	offloadtest.Bound(t, time.Since(term), ackWait/2, "the other replica's result after the SIGTERM")
	<-first.Done()
}

// nats-server SIGKILLed and restarted (same store) while 200 tasks run on
// two toolworker replicas: 200 results, one each.
func TestNATSServerKilledDuring200Tasks(t *testing.T) {
	t.Parallel()
	twBin, _ := binaries(t)
	ns := natstest.StartNATSServer(t, natsServerBinary(t))
	_, js := agentConn(t, ns.URL())
	for i := range 2 {
		startToolworker(t, twBin, ns.URL(), "w"+strconv.Itoa(i), "--concurrency", "8", "--ack-wait", "5s")
	}
	const n = 200
	conv := protocol.NewID()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for range n {
		if err := publishTask(ctx, js, sleepTask(conv, 0.05)); err != nil {
			t.Fatal(err)
		}
	}
	awaitResults(t, js, conv, n/4, time.Minute)
	ns.Kill()
	ns.Restart(t)
	awaitResults(t, js, conv, n, 2*time.Minute)
	results := readResults(t, js, conv)
	if len(results) != n {
		t.Fatalf("%d tasks have a result, want %d", len(results), n)
	}
	for id, rs := range results {
		if len(rs) != 1 {
			t.Errorf("task %s has %d stored results", id, len(rs))
		}
		if rs[0].res.Status != protocol.StatusOK {
			t.Errorf("task %s: %+v", id, rs[0].res)
		}
	}
}
