// Package servetest is the test kit of agent serve's core and faces: a
// world on an in-process nats-server, with an agent whose tools record
// what ran, and replicas built by the one wiring (agentproc), so that the
// tests of natsjs/serve, natsjs/serve/notify and web drive what agent
// serve runs.
package servetest

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/tool"
	"github.com/offload-dev/offload/pkg/web"
)

// Wait bounds every wait on a signal in these tests.
const Wait = jstest.Wait

// LeaseTTL is the tests' lease: a replica's conversations are free again
// this soon after it stopped renewing.
const LeaseTTL = 2 * time.Second

// Logger is the tests' logger (jstest.Logger).
func Logger() *slog.Logger { return jstest.Logger() }

// World is one test's world ([Setup]): a server, and what every replica's
// agent counts across replicas: the model's requests that follow a tool's
// return (continuations), by target, and the runs of each tool.
type World struct {
	Srv *natstest.Server

	Mu            sync.Mutex
	Continuations map[string]int // target → model requests after its tool returned
	Requests      int            // every model request
	Deploys       map[string]int
	Finished      chan string // target, when its conversation's last request is answered
	Deployed      chan string // target, when deploy ran
	SlowStarted   chan struct{}
	SlowGate      chan struct{}
	// Approval, if set, is the agents' approval expiry (SPEC §12);
	// DeployMeta the deploy tool's metadata.
	Approval   *session.ApprovalPolicy
	DeployMeta map[string]any
	// Timers has the replicas write the timeouts themselves (a server
	// without schedules).
	Timers bool
	// Trust counts every decision's by as its approver's identity for a
	// quorum (agent serve --trust-nats-by).
	Trust bool
	// NonBlocking makes the replicas' approvals non-blocking (spec
	// approve: background).
	NonBlocking bool
	// Stream makes the agents' model requests streamed (text_delta
	// events).
	Stream bool
	ids    *convstore.Identities
}

// Setup returns a new world on a server of its own.
func Setup(t *testing.T) *World {
	t.Helper()
	return &World{Srv: natstest.Start(t), Continuations: map[string]int{}, Deploys: map[string]int{},
		Finished: make(chan string, 4096), Deployed: make(chan string, 4096), SlowStarted: make(chan struct{}, 16), SlowGate: make(chan struct{})}
}

// TargetArgs are the arguments of the test agent's tools.
type TargetArgs struct {
	Target string `json:"target"`
}

// Model calls the tool its prompt names ("deploy X" or "slow X", "both X": see both) with
// target X (and fails on "fail X"), and answers a tool's return with "done <content>"
// (a return "again X": the same tool called again with target X).
func (b *World) Model() llm.Model {
	return script.New("serve-test", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		b.Mu.Lock()
		b.Requests++
		b.Mu.Unlock()
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				content := message.ContentText(x.Content)
				target := content[strings.LastIndex(content, " ")+1:]
				if again, ok := strings.CutPrefix(content, "again "); ok {
					// A result "again X" calls the same tool again with
					// target X (a frontend tool offered on the
					// continuation too, SPEC §18).
					args, _ := json.Marshal(TargetArgs{Target: again})
					return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: x.ToolName, ToolCallID: x.ToolCallID + "_again", Args: string(args)}}}, nil
				}
				if t, ask, ok := both(req); ok && strings.HasSuffix(content, "meanwhile.") && (x.ToolName == "deploy" || x.ToolName == "ask") {
					// "both X": the non-blocking deploy acknowledged,
					// slow X keeps the run live; "both+ask X" asks X
					// (non-blocking) in between.
					args, _ := json.Marshal(TargetArgs{Target: t})
					next, id := "slow", "call_2"
					if ask && x.ToolName == "deploy" {
						next, id = "ask", "call_3"
					}
					return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: next, ToolCallID: id, Args: string(args)}}}, nil
				}
				b.Mu.Lock()
				b.Continuations[target]++
				b.Mu.Unlock()
				b.Finished <- target
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
					b.Mu.Lock()
					b.Continuations[target]++
					b.Mu.Unlock()
					b.Finished <- target
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
						args, _ := json.Marshal(TargetArgs{Target: tg})
						parts = append(parts, message.ToolCall{ToolName: "deploy", ToolCallID: fmt.Sprintf("call_%d", i+1), Args: string(args)})
					}
					return &llm.Response{Parts: parts}, nil
				}
				if name == "fail" {
					return nil, errors.New("the model is down")
				}
				args, _ := json.Marshal(TargetArgs{Target: target})
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

// Agent is the test's agent: deploy (approval-gated), slow (waits for
// slowGate) and ask (an external call: "ask X" is answered from outside),
// all run in the replica's process; it returns its tools too.
func (b *World) Agent(t *testing.T) (*agent.Agent, tool.Toolset) {
	t.Helper()
	deploy := tool.Func("deploy", "Deploy a target.", func(_ context.Context, _ *tool.RunContext, a TargetArgs) (string, error) {
		b.Mu.Lock()
		b.Deploys[a.Target]++
		b.Mu.Unlock()
		b.Deployed <- a.Target
		return "deployed " + a.Target, nil
	}, tool.NeedsApproval(), tool.Meta(b.DeployMeta))
	slow := tool.Func("slow", "Works slowly.", func(ctx context.Context, _ *tool.RunContext, a TargetArgs) (string, error) {
		half := 0.5
		progress.Report(ctx, "half of "+a.Target+" done", &half)
		b.SlowStarted <- struct{}{}
		select {
		case <-b.SlowGate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "slowed " + a.Target, nil
	})
	ask := tool.Func("ask", "Asks someone outside.", func(context.Context, *tool.RunContext, TargetArgs) (string, error) {
		return "", &tool.CallDeferred{}
	})
	set, err := tool.NewSet(deploy, slow, ask)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Model: b.Model(), Toolsets: []tool.Toolset{set}, AllowDeferred: true, Stream: b.Stream})
	if err != nil {
		t.Fatal(err)
	}
	return a, set
}

// Replica is one agent serve replica, on a connection of its own, built
// by agentproc as agent serve builds it.
type Replica struct {
	Svc     *serve.Service
	Served  *agentproc.Served
	Metrics *metrics.Serve
	JS      jetstream.JetStream
	Convs   *convstore.Conversations
	Proc    *agentproc.Process
}

// Replica starts a replica serving the agents named names (the test's
// agent; "ops" when none is named), stopped when the test ends.
func (b *World) Replica(t *testing.T, holder string, names ...string) *Replica {
	t.Helper()
	return b.ReplicaLog(t, holder, jstest.Logger(), names...)
}

// ReplicaLog is Replica with the service's logs going to log.
func (b *World) ReplicaLog(t *testing.T, holder string, log *slog.Logger, names ...string) *Replica {
	t.Helper()
	return b.ReplicaWith(t, holder, ReplicaOpts{Log: log}, names...)
}

// ReplicaOpts are what a test changes of a replica: its logger, its
// leases' TTL (LeaseTTL when zero), and its service's configuration.
type ReplicaOpts struct {
	Log      *slog.Logger
	InboxLog *slog.Logger // the inbox's (its refusals); jstest.Logger() when nil
	LeaseTTL time.Duration
	Config   func(*serve.Config)
	// Remote, if set, gives the replica a remote client (workers' tools,
	// agentproc.Options.Remote), and Agents, if set, its agents, built on
	// its process (its client's toolset) instead of the test's agent.
	Remote *remote.ClientConfig
	Agents func(t *testing.T, p *agentproc.Process) []serve.Agent
}

// ReplicaWith is Replica with opts.
func (b *World) ReplicaWith(t *testing.T, holder string, opts ReplicaOpts, names ...string) *Replica {
	t.Helper()
	if len(names) == 0 {
		names = []string{"ops"}
	}
	log := cmp.Or(opts.Log, jstest.Logger())
	ttl := cmp.Or(opts.LeaseTTL, LeaseTTL)
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	p, err := agentproc.Open(ctx, agentproc.Options{Conn: b.Srv.Conn(t), Provision: natsjs.ProvisionOptions{AckWait: 2 * time.Second},
		Logger: cmp.Or(opts.InboxLog, jstest.Logger()), Conversations: true, Identities: b.Identities(), LeaseTTL: ttl, Remote: opts.Remote})
	if err != nil {
		t.Fatal(err)
	}
	var agents []serve.Agent
	for _, n := range names {
		a, tools := b.Agent(t)
		agents = append(agents, serve.Agent{Name: n, Digest: "sha256:test", Agent: a, Tools: tools, Approval: b.Approval, NonBlocking: b.NonBlocking})
	}
	if opts.Agents != nil {
		agents = opts.Agents(t, p)
	}
	srv, err := p.Service(ctx, agentproc.ServeOptions{Agents: agents, Holder: holder, Service: func(c *serve.Config) {
		c.Logger, c.RetryDelay, c.MissingDelay, c.TimerInterval = log, 100*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
		if b.Timers {
			// The replicas write the timeouts themselves (from
			// Config.Records), as on a server that cannot schedule
			// messages.
			c.Expirer = nil
		}
		if opts.Config != nil {
			opts.Config(c)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := &Replica{Svc: srv.Service, Served: srv, Metrics: srv.Metrics, JS: p.JetStream, Convs: p.Conversations, Proc: p}
	t.Cleanup(func() { r.Close(t) })
	return r
}

// Close stops the replica (idempotent).
func (r *Replica) Close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := r.Served.Stop(ctx); err != nil {
		t.Error(err)
	}
	if err := r.Proc.Close(ctx); err != nil { // its remote client, if any
		t.Error(err)
	}
}

// Face serves the replica's HTTP face (agentproc.Process.Face) with the
// tokens of lines (`TOKEN ROLE NAME` each), its requests counted in m and
// reg's metrics on /metrics when set, its public URL the server's own
// unless o sets one, stopped when the test ends.
func (r *Replica) Face(t *testing.T, lines string, o agentproc.FaceOptions) (*httptest.Server, *agentproc.Face) {
	t.Helper()
	tokens, err := web.ParseTokens(strings.NewReader(lines))
	if err != nil {
		t.Fatal(err)
	}
	o.Tokens = tokens
	var h http.Handler
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { h.ServeHTTP(w, req) }))
	o.PublicURL = cmp.Or(o.PublicURL, "http://"+srv.Listener.Addr().String())
	f, err := r.Proc.Face(t.Context(), r.Served, o)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	h = f.Handler
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(f.Stop)
	return srv, f
}

// Start starts a conversation with prompt on r and waits for its first
// run to end; it returns the run's Final.
func (r *Replica) Start(t *testing.T, prompt string) service.Final {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	run, err := r.Svc.StartConversation(ctx, "ops", prompt, "")
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

// Decide publishes an approval of conversation conv's task, as nats pub
// does.
func (b *World) Decide(t *testing.T, js jetstream.JetStream, conv, task string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if _, err := js.Publish(ctx, fmt.Sprintf("tools.decision.%s.%s", conv, task), []byte(`{"approved":true,"by":"ann"}`)); err != nil {
		t.Error(err)
	}
}

// Marker publishes a wake marker for conversation conv.
func (b *World) Marker(t *testing.T, js jetstream.JetStream, conv string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if _, err := js.Publish(ctx, natsjs.WakeSubject("", conv), nil); err != nil {
		t.Error(err)
	}
}

// Counts returns the continuations and the deploys of target so far.
func (b *World) Counts(target string) (continuations, deploys int) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Continuations[target], b.Deploys[target]
}

// Wakes returns how many wakes r observed (offload_wake_seconds' count).
func (r *Replica) Wakes(t *testing.T) uint64 {
	t.Helper()
	var d dto.Metric
	if err := r.Metrics.WakeSeconds.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// Paused asserts that f is a pause on one approval and returns its task.
func Paused(t *testing.T, f service.Final) string {
	t.Helper()
	if f.Status != "paused" || len(f.Pending) != 1 {
		t.Fatalf("first run: %+v, want paused on one approval", f)
	}
	return f.Pending[0].TaskID
}

// Identities is how the replicas and the API authenticate the approvals
// of a quorum: the service's key (the test's), and every by with trust.
func (b *World) Identities() *convstore.Identities {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if b.ids == nil {
		b.ids = &convstore.Identities{Private: ed25519.NewKeyFromSeed([]byte("the test service's decision key!")), TrustBy: b.Trust}
	}
	return b.ids
}

// Finished waits until conversation conv is stored finished with output.
func Finished(t *testing.T, r *Replica, conv, output string) {
	t.Helper()
	// The save ending a continuation on another replica has no signal
	// outside it: the stored state is polled.
	offloadtest.Eventually(t, "conversation "+conv+" finished", func() error {
		c, err := r.Svc.Get(context.Background(), conv)
		if err != nil {
			return err
		}
		if c.Status != "finished" || c.Output != output {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
}

// DecisionsOf returns the decisions stored on task's decision subject
// from now on, each once stored (an ordered consumer: the signal of the
// server's own write at a timeout).
func DecisionsOf(t *testing.T, js jetstream.JetStream, conv, task string) <-chan jetstream.Msg {
	t.Helper()
	c, err := js.OrderedConsumer(t.Context(), "TOOLS_DECISIONS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tools.decision." + conv + "." + task}})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan jetstream.Msg, 8)
	cc, err := c.Consume(func(m jetstream.Msg) { out <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return out
}
