package serve_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestLapsedApprovedAttemptAnsweredBefore is the sequence that left the
// chaos's last conversation running for ever (RELIABILITY.md "The
// chaos"): a worker's call paused on its approval (attempt 0, the worker
// deferred it); approved, the replica that continued the conversation
// dispatched attempt 1 and died while it ran, before it saved anything;
// the worker stored attempt 1's result; the nats-server restarted (it then
// no longer knows the task's ID: the task was acknowledged, and a
// workqueue stream keeps no ID of a message it removed). The replica that
// continues the lapsed run reads attempt 1's result past the checkpoint
// and refuses it (wrong_attempt: the stored pending record waits for
// attempt 0), applies the approval again and dispatches attempt 1 again;
// the worker finds the attempt answered and acknowledges it without
// running it or publishing anything. The call must be answered by the
// stored result (it was left waiting for its deadline, 10 minutes, the
// conversation running with a stale pending record), the tool having run
// once for attempt 1.
func TestLapsedApprovedAttemptAnsweredBefore(t *testing.T) {
	b := servetest.Setup(t)
	var first, approved atomic.Int32 // runs of each attempt
	running, release := make(chan struct{}, 1), make(chan struct{})
	job := tool.Func("job", "Deploys once approved.", func(ctx context.Context, rc *tool.RunContext, a servetest.TargetArgs) (string, error) {
		if rc.Attempt == 0 {
			first.Add(1)
			return "", &tool.ApprovalRequired{} // the worker's deferral: once approved, attempt 1
		}
		approved.Add(1)
		running <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "deployed " + a.Target, nil
	})
	startWorker := func(id string) *worker.Worker {
		return jstest.StartWorker(t, b.Srv, worker.Config{ID: id, Tools: []*tool.Tool{job}})
	}
	w1 := startWorker("w1")

	continued := make(chan string, 8)
	replica := func(name string, finals chan<- service.Final) *servetest.Replica {
		return b.ReplicaWith(t, name, servetest.ReplicaOpts{
			Remote: &remote.ClientConfig{},
			Agents: func(t *testing.T, p *agentproc.Process) []serve.Agent {
				tools := p.Client.Toolset()
				a, err := agent.New(agent.Config{Model: b.Model(), Toolsets: []tool.Toolset{tools}, AllowDeferred: true})
				if err != nil {
					t.Fatal(err)
				}
				return []serve.Agent{{Name: "ops", Digest: "sha256:test", Agent: a, Tools: tools}}
			},
			Config: func(c *serve.Config) {
				c.SweepInterval = 200 * time.Millisecond
				c.OnContinue = func(conv string) { continued <- conv }
				c.OnFinal = func(f service.Final) { finals <- f }
			},
		})
	}
	servesJob := func(r *servetest.Replica) {
		offloadtest.Eventually(t, "job advertised to the replica", func() error {
			tools, err := r.Proc.Client.Toolset().Tools(t.Context())
			if err == nil && (len(tools) != 1 || tools[0].Name != "job") {
				err = errors.New("not yet")
			}
			return err
		})
	}
	finals1, finals2 := make(chan service.Final, 8), make(chan service.Final, 8)
	r1 := replica("r1", finals1)
	servesJob(r1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*servetest.LeaseTTL+3*servetest.Wait)
	defer cancel()
	run, err := r1.Svc.StartConversation(ctx, "ops", "job x", "")
	if err != nil {
		t.Fatal(err)
	}
	conv := run.ConversationID
	f := offloadtest.WaitOrTimeout(t, finals1, "the pause")
	task := servetest.Paused(t, f)
	if first.Load() != 1 {
		t.Fatalf("attempt 0 ran %d times", first.Load())
	}

	results := jstest.SubscribeResults(t, b.Srv.Conn(t))
	b.Decide(t, r1.JS, conv, task)
	offloadtest.WaitOrTimeout(t, continued, "r1's continuation")
	offloadtest.WaitOrTimeout(t, running, "attempt 1 running, dispatched by r1")
	r1.JS.Conn().Close() // the kill: r1 saved nothing since it dispatched attempt 1
	close(release)
	for res := offloadtest.WaitOrTimeout(t, results, "attempt 1's result stored"); res.Attempt != 1 || res.TaskID != task; {
		res = offloadtest.WaitOrTimeout(t, results, "attempt 1's result stored")
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), servetest.Wait)
	defer stopCancel()
	if err := w1.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	b.Srv.Restart(t) // forgets the acknowledged task's ID
	startWorker("w2")

	r2 := replica("r2", finals2)
	servesJob(r2)
	if c := offloadtest.WaitOrTimeoutWithin(t, continued, servetest.LeaseTTL+servetest.Wait, "r2's continuation of the lapsed run"); c != conv {
		t.Fatalf("continued %s, want %s", c, conv)
	}
	end := offloadtest.WaitOrTimeout(t, finals2, "the end of r2's continuation")
	if end.Status != "finished" || end.Output != "done deployed x" {
		t.Fatalf("r2's continuation ended %+v, want finished with attempt 1's result", end)
	}
	if first.Load() != 1 || approved.Load() != 1 {
		t.Fatalf("attempt 0 ran %d times, attempt 1 %d: want once each", first.Load(), approved.Load())
	}
}
