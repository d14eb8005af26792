package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
)

// wait bounds every wait on a signal in these tests.
const wait = jstest.Wait

// leaseTTL is the tests' lease: a replica's conversations are free again
// this soon after it stopped renewing.
const leaseTTL = 2 * time.Second

// bundle is one test's world (setup): a server, and what every replica's
// agent counts across replicas: the model's requests that follow a tool's
// return (continuations), by target, and the runs of each tool.
type bundle struct {
	srv *natstest.Server

	mu            sync.Mutex
	continuations map[string]int // target → model requests after its tool returned
	requests      int            // every model request
	deploys       map[string]int
	finished      chan string // target, when its conversation's last request is answered
	deployed      chan string // target, when deploy ran
	slowStarted   chan struct{}
	slowGate      chan struct{}
	// approval, if set, is the agents' approval expiry (SPEC §12);
	// deployMeta the deploy tool's metadata.
	approval   *session.ApprovalPolicy
	deployMeta map[string]any
	// timers has the replicas write the timeouts themselves (a server
	// without schedules).
	timers bool
	// trust counts every decision's by as its approver's identity for a
	// quorum (agent serve --trust-nats-by).
	trust bool
	// ids authenticates the approvals of a quorum (identities).
	ids *convstore.Identities
	// nonBlocking makes the replicas' approvals non-blocking (spec
	// approve: background).
	nonBlocking bool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{srv: natstest.Start(t), continuations: map[string]int{}, deploys: map[string]int{},
		finished: make(chan string, 4096), deployed: make(chan string, 4096), slowStarted: make(chan struct{}, 16), slowGate: make(chan struct{})}
}

type targetArgs struct {
	Target string `json:"target"`
}

// model calls the tool its prompt names ("deploy X" or "slow X", "both X": see both) with
// target X (and fails on "fail X"), and answers a tool's return with "done <content>".
func (b *bundle) model() llm.Model {
	return script.New("serve-test", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		b.mu.Lock()
		b.requests++
		b.mu.Unlock()
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				content := message.ContentText(x.Content)
				target := content[strings.LastIndex(content, " ")+1:]
				if t, ask, ok := both(req); ok && strings.HasSuffix(content, "meanwhile.") && (x.ToolName == "deploy" || x.ToolName == "ask") {
					// "both X": the non-blocking deploy acknowledged,
					// slow X keeps the run live; "both+ask X" asks X
					// (non-blocking) in between.
					args, _ := json.Marshal(targetArgs{Target: t})
					next, id := "slow", "call_2"
					if ask && x.ToolName == "deploy" {
						next, id = "ask", "call_3"
					}
					return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: next, ToolCallID: id, Args: string(args)}}}, nil
				}
				b.mu.Lock()
				b.continuations[target]++
				b.mu.Unlock()
				b.finished <- target
				return &llm.Response{Parts: []message.Part{message.Text{Content: "done " + content}}}, nil
			case message.UserPrompt:
				var text strings.Builder
				for _, c := range x.Content {
					text.WriteString(c.Text)
				}
				if strings.HasPrefix(text.String(), "Background tool '") {
					// A follow-up: the result of a call that ran later.
					content := text.String()
					target := content[strings.LastIndex(content, " ")+1:]
					b.mu.Lock()
					b.continuations[target]++
					b.mu.Unlock()
					b.finished <- target
					return &llm.Response{Parts: []message.Part{message.Text{Content: "done " + content}}}, nil
				}
				name, target, _ := strings.Cut(text.String(), " ")
				if name == "both" || name == "both+ask" {
					name = "deploy"
				}
				if name == "deploys" {
					// "deploys A B": deploy A and B in one response.
					var parts []message.Part
					for i, tg := range strings.Fields(target) {
						args, _ := json.Marshal(targetArgs{Target: tg})
						parts = append(parts, message.ToolCall{ToolName: "deploy", ToolCallID: fmt.Sprintf("call_%d", i+1), Args: string(args)})
					}
					return &llm.Response{Parts: parts}, nil
				}
				if name == "fail" {
					return nil, errors.New("the model is down")
				}
				args, _ := json.Marshal(targetArgs{Target: target})
				return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: name, ToolCallID: "call_1", Args: string(args)}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "nothing"}}}, nil
	})
}

// both reports whether req's conversation began with "both X" (deploy X,
// then slow X once deploy's non-blocking call is acknowledged) or
// "both+ask X" (ask X in between, ask true), and X.
func both(req *llm.Request) (target string, ask, ok bool) {
	for _, p := range req.Messages[0].Parts {
		if u, isPrompt := p.(message.UserPrompt); isPrompt && len(u.Content) > 0 {
			if target, ok := strings.CutPrefix(u.Content[0].Text, "both "); ok {
				return target, false, true
			}
			if target, ok := strings.CutPrefix(u.Content[0].Text, "both+ask "); ok {
				return target, true, true
			}
		}
	}
	return "", false, false
}

// agent is the test's agent: deploy (approval-gated), slow (waits for
// slowGate) and ask (an external call: "ask X" is answered from outside),
// all run in the replica's process; it returns its tools too.
func (b *bundle) agent(t *testing.T) (*agent.Agent, tool.Toolset) {
	t.Helper()
	deploy := tool.Func("deploy", "Deploy a target.", func(_ context.Context, _ *tool.RunContext, a targetArgs) (string, error) {
		b.mu.Lock()
		b.deploys[a.Target]++
		b.mu.Unlock()
		b.deployed <- a.Target
		return "deployed " + a.Target, nil
	}, tool.NeedsApproval(), tool.Meta(b.deployMeta))
	slow := tool.Func("slow", "Works slowly.", func(ctx context.Context, _ *tool.RunContext, a targetArgs) (string, error) {
		b.slowStarted <- struct{}{}
		select {
		case <-b.slowGate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "slowed " + a.Target, nil
	})
	ask := tool.Func("ask", "Asks someone outside.", func(context.Context, *tool.RunContext, targetArgs) (string, error) {
		return "", &tool.CallDeferred{}
	})
	set, err := tool.NewSet(deploy, slow, ask)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Model: b.model(), Toolsets: []tool.Toolset{set}, AllowDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	return a, set
}

// replica is one agent serve replica, on a connection of its own.
type replica struct {
	svc     *serve.Service
	metrics *metrics.Serve
	js      jetstream.JetStream
	convs   *convstore.Conversations
}

// replica starts a replica serving the agent named name (the test's
// agent), stopped when the test ends.
func (b *bundle) replica(t *testing.T, holder string, names ...string) *replica {
	t.Helper()
	return b.replicaLog(t, holder, jstest.Logger(), names...)
}

// replicaLog is replica with the service's logs going to log.
func (b *bundle) replicaLog(t *testing.T, holder string, log *slog.Logger, names ...string) *replica {
	t.Helper()
	return b.replicaWith(t, holder, replicaOpts{log: log}, names...)
}

// replicaOpts are what a test changes of a replica: its logger, its
// leases' TTL (leaseTTL when zero), and its service's configuration.
type replicaOpts struct {
	log      *slog.Logger
	inboxLog *slog.Logger // the inbox's (its refusals); jstest.Logger() when nil
	leaseTTL time.Duration
	config   func(*serve.Config)
}

// replicaWith is replica with opts.
func (b *bundle) replicaWith(t *testing.T, holder string, opts replicaOpts, names ...string) *replica {
	t.Helper()
	if len(names) == 0 {
		names = []string{"ops"}
	}
	log := opts.log
	if log == nil {
		log = jstest.Logger()
	}
	ttl := opts.leaseTTL
	if ttl == 0 {
		ttl = leaseTTL
	}
	js := b.srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	prov := natsjs.ProvisionOptions{AckWait: 2 * time.Second}
	inboxLog := opts.inboxLog
	if inboxLog == nil {
		inboxLog = jstest.Logger()
	}
	convs, err := convstore.Open(ctx, convstore.OpenConfig{JetStream: js, Provision: prov, Logger: inboxLog, Identities: b.identities()})
	if err != nil {
		t.Fatal(err)
	}
	store, err := convstore.New(ctx, convstore.Config{JetStream: js, Provision: prov, Logger: jstest.Logger(), LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	var agents []serve.Agent
	for _, n := range names {
		a, tools := b.agent(t)
		agents = append(agents, serve.Agent{Name: n, Digest: "sha256:test", Agent: a, Tools: tools, Approval: b.approval, NonBlocking: b.nonBlocking})
	}
	var expirer session.Expirer = convs.Announcer
	var timers *convstore.Pending
	if b.timers {
		expirer = nil
		if timers, err = convstore.OpenPending(ctx, convstore.OpenConfig{JetStream: js, Provision: prov}); err != nil {
			t.Fatal(err)
		}
	}
	m := metrics.NewServe(nil)
	cfg := serve.Config{JetStream: js, Provision: prov, Agents: agents, Holder: holder, Logger: log, Metrics: m,
		RetryDelay: 100 * time.Millisecond, MissingDelay: 200 * time.Millisecond, Expirer: expirer, Timers: timers, TimerInterval: 100 * time.Millisecond,
		Session: session.Config{Store: store, Inbox: convs.Inbox, Announcer: convs.Announcer}}
	if opts.config != nil {
		opts.config(&cfg)
	}
	svc, err := serve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Open(ctx); err != nil {
		t.Fatal(err)
	}
	r := &replica{svc: svc, metrics: m, js: js, convs: convs}
	t.Cleanup(func() { r.close(t) })
	return r
}

func (r *replica) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := r.svc.Close(ctx); err != nil {
		t.Error(err)
	}
}

// start starts a conversation with prompt on r and waits for its first
// run to end; it returns the run's Final.
func (r *replica) start(t *testing.T, prompt string) serve.Final {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	run, err := r.svc.Start(ctx, "ops", prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.Done():
	case <-ctx.Done():
		t.Fatalf("run of %q did not end", prompt)
	}
	return run.Final()
}

// decide publishes an approval of conversation conv's task, as nats pub
// does.
func (b *bundle) decide(t *testing.T, js jetstream.JetStream, conv, task string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := js.Publish(ctx, fmt.Sprintf("tools.decision.%s.%s", conv, task), []byte(`{"approved":true,"by":"ann"}`)); err != nil {
		t.Error(err)
	}
}

// marker publishes a wake marker for conversation conv.
func (b *bundle) marker(t *testing.T, js jetstream.JetStream, conv string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := js.Publish(ctx, natsjs.WakeSubject("", conv), nil); err != nil {
		t.Error(err)
	}
}

func (b *bundle) counts(target string) (continuations, deploys int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.continuations[target], b.deploys[target]
}

// wakes returns how many wakes r observed (offload_wake_seconds' count).
func (r *replica) wakes(t *testing.T) uint64 {
	t.Helper()
	var d dto.Metric
	if err := r.metrics.WakeSeconds.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// paused asserts that f is a pause on one approval and returns its task.
func paused(t *testing.T, f serve.Final) string {
	t.Helper()
	if f.Status != "paused" || len(f.Pending) != 1 {
		t.Fatalf("first run: %+v, want paused on one approval", f)
	}
	return f.Pending[0].TaskID
}

// identities is how the replicas and the API authenticate the approvals
// of a quorum: the service's key (the test's), and every by with trust.
func (b *bundle) identities() *convstore.Identities {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ids == nil {
		b.ids = &convstore.Identities{Key: []byte("the test service's HMAC key 0123"), TrustBy: b.trust}
	}
	return b.ids
}
