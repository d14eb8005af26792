package serve_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
)

// killWorld is the agents of TestLapsedRunContinued: the model calls the
// tool work on the prompt and answers its return with "done"; on the
// killed replica, the request of stage hangs until the run is cancelled
// (a process that died with it in flight).
type killWorld struct {
	mu        sync.Mutex
	requests  map[string]int // replica → model requests
	works     map[string]int // replica → runs of work completed
	inflight  chan string    // the killed replica's hung stage
	continued chan string    // conversations continued, on any replica
	finals    chan service.Final
}

// agent is the agent of replica name; hang is the stage at which its
// run hangs ("" none): "model" (the first model request) or "tool" (the
// tool's run).
func (k *killWorld) agent(t *testing.T, name, hang string) serve.Agent {
	t.Helper()
	work := tool.Func("work", "Works.", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		if hang == "tool" {
			k.inflight <- "tool"
			<-ctx.Done()
			return "", ctx.Err()
		}
		k.mu.Lock()
		k.works[name]++
		k.mu.Unlock()
		return "worked", nil
	})
	set, err := tool.NewSet(work)
	if err != nil {
		t.Fatal(err)
	}
	model := script.New("lapsed-test", func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		k.mu.Lock()
		k.requests[name]++
		k.mu.Unlock()
		if hang == "model" {
			k.inflight <- "model"
			<-ctx.Done()
			return nil, ctx.Err()
		}
		for _, p := range req.Messages[len(req.Messages)-1].Parts {
			if r, ok := p.(message.ToolReturn); ok {
				return &llm.Response{Parts: []message.Part{message.Text{Content: "done " + message.ContentText(r.Content)}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "work", ToolCallID: "call_1", Args: "{}"}}}, nil
	})
	a, err := agent.New(agent.Config{Model: model, Toolsets: []tool.Toolset{set}, AllowDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	return serve.Agent{Name: "ops", Digest: "sha256:test", Agent: a, Tools: set}
}

// A replica that dies mid-run (its connection gone, its lease never
// released: a SIGKILL) leaves its conversation's status running and
// nothing to wake it: no message comes. Another replica's sweep of the
// running conversations continues it once the lease lapsed, exactly once
// across two live replicas: hung in its model request, from the state
// saved before it (the request is made again, the tool completed once);
// hung in its tool, from the step stored with the model's response (SPEC
// §20: no model request again), the in-process tool, not declared
// idempotent and started, an unknown effect for a person, which runs it
// once approved.
func TestLapsedRunContinued(t *testing.T) {
	for _, hang := range []string{"model", "tool"} {
		t.Run(hang, func(t *testing.T) {
			b := servetest.Setup(t)
			k := &killWorld{requests: map[string]int{}, works: map[string]int{}, inflight: make(chan string, 1),
				continued: make(chan string, 16), finals: make(chan service.Final, 16)}
			opts := func(name, hang string) servetest.ReplicaOpts {
				return servetest.ReplicaOpts{Config: func(c *serve.Config) {
					c.Agents = []serve.Agent{k.agent(t, name, hang)}
					c.SweepInterval = 200 * time.Millisecond
					c.OnContinue = func(conv string) { k.continued <- conv }
					if hang == "" {
						c.OnFinal = func(f service.Final) { k.finals <- f }
					}
				}}
			}
			r1 := b.ReplicaWith(t, "r1", opts("r1", hang))
			r2 := b.ReplicaWith(t, "r2", opts("r2", ""))
			b.ReplicaWith(t, "r3", opts("r3", ""))
			run, err := r1.Svc.StartConversation(context.Background(), "ops", "work", "")
			if err != nil {
				t.Fatal(err)
			}
			offloadtest.WaitOrTimeout(t, k.inflight, "r1's run in its "+hang)
			// The kill: r1 no longer reaches the server; its lease lapses
			// (servetest.LeaseTTL) and its run is cancelled when it notices.
			r1.JS.Conn().Close()
			conv := offloadtest.WaitOrTimeoutWithin(t, k.continued, servetest.LeaseTTL+servetest.Wait, "a continuation on another replica")
			if conv != run.ConversationID {
				t.Fatalf("continued %s, want %s", conv, run.ConversationID)
			}
			f := offloadtest.WaitOrTimeout(t, k.finals, "the continuation's end")
			if hang == "tool" {
				if f.Status != "paused" || len(f.Pending) != 1 || f.Pending[0].Metadata["offload.effect"] != "unknown" {
					t.Fatalf("continuation ended %+v, want paused on an unknown effect", f)
				}
				k.mu.Lock()
				if n := k.requests["r2"] + k.requests["r3"]; n != 0 || k.works["r2"]+k.works["r3"] != 0 {
					t.Errorf("%d model requests, %v works after the kill; want none", n, k.works)
				}
				k.mu.Unlock()
				b.Decide(t, r2.JS, conv, f.Pending[0].TaskID)
				if c := offloadtest.WaitOrTimeout(t, k.continued, "the decision's continuation"); c != conv {
					t.Fatalf("continued %s, want %s", c, conv)
				}
				f = offloadtest.WaitOrTimeout(t, k.finals, "the approved continuation's end")
			}
			if f.ConversationID != conv || f.Status != "finished" || !strings.Contains(f.Output, "done worked") {
				t.Fatalf("continuation ended %+v", f)
			}
			offloadtest.WaitOrTimeout(t, run.Done(), "r1's run cancelled")
			if f := run.Final(); f.Status != "failed" {
				t.Errorf("r1's run: %+v, want failed (its lease lost)", f)
			}
			select {
			case c := <-k.continued:
				t.Errorf("a second continuation of %s", c)
			default:
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			if n := k.works["r2"] + k.works["r3"]; n != 1 {
				t.Errorf("work completed %d times, want once: %v", n, k.works)
			}
			// Hung in the model: the checkpoint is the state saved before
			// the request, made again (then the tool's result's). Hung in
			// the tool: only the result's request.
			want := map[string]int{"model": 2, "tool": 1}[hang]
			if n := k.requests["r2"] + k.requests["r3"]; n != want {
				t.Errorf("%d model requests after the kill, want %d (%v)", n, want, k.requests)
			}
		})
	}
}

// Many runs hung on a replica that dies, three replicas sweeping every
// 50 ms (their sweeps overlapping): each conversation is continued
// exactly once, its tool completed once, and all finish.
func TestLapsedRunsContinuedOnce(t *testing.T) {
	const n = 20
	b := servetest.Setup(t)
	k := &killWorld{requests: map[string]int{}, works: map[string]int{}, inflight: make(chan string, n),
		continued: make(chan string, 4*n), finals: make(chan service.Final, 4*n)}
	opts := func(name, hang string) servetest.ReplicaOpts {
		return servetest.ReplicaOpts{Config: func(c *serve.Config) {
			c.Agents = []serve.Agent{k.agent(t, name, hang)}
			c.SweepInterval = 50 * time.Millisecond
			c.OnContinue = func(conv string) { k.continued <- conv }
			if hang == "" {
				c.OnFinal = func(f service.Final) { k.finals <- f }
			}
		}}
	}
	r1 := b.ReplicaWith(t, "r1", opts("r1", "model"))
	for _, name := range []string{"r2", "r3", "r4"} {
		b.ReplicaWith(t, name, opts(name, ""))
	}
	want := map[string]bool{}
	for range n {
		run, err := r1.Svc.StartConversation(context.Background(), "ops", "work", "")
		if err != nil {
			t.Fatal(err)
		}
		want[run.ConversationID] = true
	}
	for range n {
		offloadtest.WaitOrTimeout(t, k.inflight, "r1's runs in their model request")
	}
	r1.JS.Conn().Close()
	done := map[string]bool{}
	for range n {
		f := offloadtest.WaitOrTimeoutWithin(t, k.finals, servetest.LeaseTTL+servetest.Wait, "the continuations' ends")
		if !want[f.ConversationID] || done[f.ConversationID] || f.Status != "finished" {
			t.Fatalf("continuation ended %+v (done before: %t)", f, done[f.ConversationID])
		}
		done[f.ConversationID] = true
	}
	seen := map[string]int{}
	for drained := false; !drained; {
		select {
		case c := <-k.continued:
			seen[c]++
		default:
			drained = true
		}
	}
	for c := range want {
		if seen[c] != 1 {
			t.Errorf("%s continued %d times, want once", c, seen[c])
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if got := k.works["r2"] + k.works["r3"] + k.works["r4"]; got != n {
		t.Errorf("work completed %d times, want %d: %v", got, n, k.works)
	}
}

// The sweep after a lease that lapses before the next interval comes just
// after the lapse, not an interval later (SPEC §11: ≤ 15 s after a kill).
func TestNextSweepAtTheLapse(t *testing.T) {
	now := time.Now()
	wait := 5 * time.Second
	if got := serve.NextSweep(now, wait, time.Time{}); got != wait {
		t.Errorf("no lease held: %v, want %v", got, servetest.Wait)
	}
	if got := serve.NextSweep(now, wait, now.Add(12*time.Second)); got != wait {
		t.Errorf("a lease lapsing after the interval: %v, want %v", got, servetest.Wait)
	}
	got := serve.NextSweep(now, wait, now.Add(2*time.Second))
	if got < 2*time.Second || got > 2*time.Second+50*time.Millisecond {
		t.Errorf("a lease lapsing in 2 s: next sweep in %v, want just after 2 s", got)
	}
	if got := serve.NextSweep(now, wait, now.Add(-time.Second)); got <= 0 || got > 50*time.Millisecond {
		t.Errorf("a lease lapsed already: next sweep in %v, want within 50 ms", got)
	}
}

// A run killed after its end's save and before its status write, or while
// calls of it waited for a person, reads running with nothing to continue:
// the sweep of the lapsed runs records its status as its stored state says
// (finished; paused, its approval still offered and continuing it) instead
// of dropping it with its entry reading running for ever (issue 41's
// chaos finding).
func TestLapsedRunWithoutItsStatus(t *testing.T) {
	for _, c := range []struct{ name, want string }{{"ended", conversation.StatusFinished}, {"waiting", conversation.StatusPaused}} {
		t.Run(c.name, func(t *testing.T) {
			b := servetest.Setup(t)
			r := b.ReplicaWith(t, "r1", servetest.ReplicaOpts{Config: func(c *serve.Config) { c.SweepInterval = 200 * time.Millisecond }})
			var conv, task string
			if c.name == "ended" {
				run, err := r.Svc.StartConversation(context.Background(), "ops", "slow x", "")
				if err != nil {
					t.Fatal(err)
				}
				offloadtest.WaitOrTimeout(t, b.SlowStarted, "the slow call")
				b.SlowGate <- struct{}{}
				offloadtest.WaitOrTimeout(t, run.Done(), "the run's end")
				conv = run.ConversationID
			} else {
				f := r.Start(t, "deploy prod")
				conv, task = f.ConversationID, servetest.Paused(t, f)
			}
			status := func() (string, error) {
				got := ""
				err := r.Convs.Store.Statuses(context.Background(), func(st conversation.Status) error {
					if st.ConversationID == conv {
						got = st.Status
					}
					return nil
				})
				return got, err
			}
			if s, err := status(); err != nil || s != c.want {
				t.Fatalf("status after the run: %q, %v; want %s", s, err, c.want)
			}
			// The kill, as the index is left by it.
			if err := r.Convs.Store.SetStatus(context.Background(), conversation.Status{ConversationID: conv, Agent: "ops", Status: conversation.StatusRunning}); err != nil {
				t.Fatal(err)
			}
			offloadtest.Eventually(t, "the status recorded "+c.want+" again", func() error {
				s, err := status()
				if err != nil {
					return err
				}
				if s != c.want {
					return fmt.Errorf("status %q", s)
				}
				return nil
			})
			if c.name == "ended" {
				servetest.Finished(t, r, conv, "done slowed x")
				return
			}
			b.Decide(t, r.JS, conv, task)
			servetest.Finished(t, r, conv, "done deployed prod")
		})
	}
}
