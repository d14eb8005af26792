package agentproc_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
	"github.com/offload-dev/offload/pkg/web"
)

// The server of these tests cuts a client as a slow consumer once it
// holds more than maxPending bytes for it; messages are at most
// maxPayload bytes.
const (
	maxPayload = 256 << 10
	maxPending = 1 << 20
)

// callDeadline is the live runs' call timeout (agent serve
// --call-timeout): before the fix, a run whose result was lost waited
// this long, then told the model DeadlineExceeded.
const callDeadline = 15 * time.Second

// replica is an agent serve replica built by agentproc as agent serve
// builds it, its agent calling job, a remote tool served by a worker:
// each call of job waits for gate, counted by target in ran.
type replica struct {
	srv     *natstest.Server
	runs    *nats.Conn // the process's connection
	served  *agentproc.Served
	face    *httptest.Server
	tokens  []string // viewers'
	started chan string
	gate    chan struct{}
	open    sync.Once

	mu  sync.Mutex
	ran map[string]int
}

type jobArgs struct {
	Target string `json:"target"`
}

// newReplica starts a server (max_payload and max_pending small), a
// worker of job on a connection of its own and a replica whose process
// connects to url (the server's, or a proxy's to it), everything stopped
// when the test ends.
func newReplica(t *testing.T, srv *natstest.Server, url string) *replica {
	t.Helper()
	r := &replica{srv: srv, started: make(chan string, 64), gate: make(chan struct{}), ran: map[string]int{}}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
	defer cancel()

	job := tool.Func("job", "Runs a job.", func(ctx context.Context, _ *tool.RunContext, a jobArgs) (string, error) {
		r.mu.Lock()
		r.ran[a.Target]++
		r.mu.Unlock()
		r.started <- a.Target
		select {
		case <-r.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "ran " + a.Target, nil
	})
	w, err := worker.New(worker.Config{Conn: srv.Conn(t), ID: "worker", Tools: []*tool.Tool{job}, Concurrency: 16, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
		defer cancel()
		_ = w.StopAndCancel(ctx)
	})

	r.runs = natstest.Connect(t, url, append(natstest.Reconnecting(50*time.Millisecond), nats.Name("agent"))...)
	p, err := agentproc.Open(ctx, agentproc.Options{Conn: r.runs, Conversations: true, Logger: log,
		Identities: &convstore.Identities{Private: ed25519.NewKeyFromSeed([]byte("the test service's decision key!"))},
		Remote:     &remote.ClientConfig{PerConversation: true, InlineDeadline: callDeadline}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	tools := p.Client.Toolset()
	for {
		changed := tools.Changed()
		offered, err := tools.Tools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(offered, func(x *tool.Tool) bool { return x.Name == "job" }) {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("job not offered")
		}
	}
	cfg, err := agentproc.AgentConfig(p.Agent(agentproc.AgentOptions{Model: jobModel(), Toolset: tools}))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	for i := range 4 {
		r.tokens = append(r.tokens, rand.Text())
		fmt.Fprintf(&lines, "%s viewer viewer%d\n", r.tokens[i], i)
	}
	tokens, err := web.ParseTokens(strings.NewReader(lines.String()))
	if err != nil {
		t.Fatal(err)
	}
	r.served, err = p.Serve(ctx, agentproc.ServeOptions{Agents: []serve.Agent{{Name: "ops", Agent: a, Tools: tools}}, Holder: "r1", Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
		defer cancel()
		if err := r.served.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	r.face = httptest.NewServer(r.served.Handler)
	t.Cleanup(r.face.Close)
	t.Cleanup(r.release) // a test that failed early lets its runs end
	return r
}

// release lets the jobs return.
func (r *replica) release() { r.open.Do(func() { close(r.gate) }) }

// jobModel calls job with the prompt as its target, and answers its
// return with "done <content>".
func jobModel() llm.Model {
	return script.New("slow-consumer", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		for _, p := range req.Messages[len(req.Messages)-1].Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				return &llm.Response{Parts: []message.Part{message.Text{Content: "done " + message.ContentText(x.Content)}}}, nil
			case message.UserPrompt:
				args, _ := json.Marshal(jobArgs{Target: x.Content[0].Text})
				return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "job", ToolCallID: "call_1", Args: string(args)}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: fmt.Sprintf("unexpected %+v", req.Messages[len(req.Messages)-1].Parts)}}}, nil
	})
}

// startRuns starts n live runs, each calling job, and waits until every
// call runs on the worker.
func (r *replica) startRuns(t *testing.T, n int) map[string]*service.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), offloadtest.Wait)
	defer cancel()
	runs := map[string]*service.Run{}
	for i := range n {
		target := fmt.Sprintf("t%d", i)
		run, err := r.served.Service.StartConversation(ctx, "ops", target, "")
		if err != nil {
			t.Fatal(err)
		}
		runs[target] = run
	}
	for range n {
		offloadtest.WaitOrTimeout(t, r.started, "a job started")
	}
	return runs
}

// finish lets the jobs return and checks that every run got its job's
// real result, each job run once.
func (r *replica) finish(t *testing.T, runs map[string]*service.Run) {
	t.Helper()
	r.release()
	r.check(t, runs)
}

// check checks that every run got its job's real result, each job run
// once.
func (r *replica) check(t *testing.T, runs map[string]*service.Run) {
	t.Helper()
	timeout := time.After(callDeadline + 2*offloadtest.Wait)
	for target, run := range runs {
		select {
		case <-run.Done():
		case <-timeout:
			t.Fatalf("the run of %s did not end", target)
		}
		if f := run.Final(); f.Status != "finished" || f.Output != "done ran "+target {
			t.Errorf("the run of %s: %+v; want its job's result", target, f)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for target := range runs {
		if r.ran[target] != 1 {
			t.Errorf("job %s ran %d times, want once", target, r.ran[target])
		}
	}
}

// watchStatus returns nc's status changes from now on.
func watchStatus(t *testing.T, nc *nats.Conn) <-chan nats.Status {
	t.Helper()
	ch := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CONNECTED, nats.CLOSED)
	t.Cleanup(func() { nc.RemoveStatusListener(ch) })
	return ch
}

// waitAway waits on ch until the connection is away (or back, with back).
func waitAway(t *testing.T, ch <-chan nats.Status, back bool, what string) {
	t.Helper()
	for {
		if s := offloadtest.WaitOrTimeout(t, ch, what); (s == nats.CONNECTED) == back {
			return
		}
	}
}

// openInboxStreams opens n inbox live streams (GET /inbox/events, as n
// browser tabs do), each viewer as many, read until the test ends.
func (r *replica) openInboxStreams(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	for i := range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.face.URL+"/inbox/events", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Cookie", "offload_token="+r.tokens[i%len(r.tokens)]) // the inbox's login cookie
		resp, err := r.face.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			t.Fatalf("inbox stream: %s", resp.Status)
		}
		wg.Go(func() {
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
		})
	}
}

// decision is a decision of maxPayload/2 bytes.
func decision() []byte {
	return fmt.Appendf(nil, `{"approved":true,"by":"ann","reason":%q}`, strings.Repeat("x", maxPayload/2))
}

// flood publishes n large decisions, as anyone who may decide does.
func flood(t *testing.T, nc *nats.Conn, subject func() string, n int) {
	t.Helper()
	for range n {
		if err := nc.Publish(subject(), decision()); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// slowConsumers returns the clients the server cuts as slow consumers
// from now on (its "Slow Consumer Detected" notices), each as the server
// names it: lang:version:name.
func slowConsumers(t *testing.T, srv *natstest.Server) <-chan string {
	t.Helper()
	l := &serverLog{cut: make(chan string, 16)}
	srv.NATS().SetLogger(l, false, false)
	return l.cut
}

// serverLog is the server's logger: it sends the client of every slow
// consumer notice on cut, and drops the rest.
type serverLog struct{ cut chan string }

func (l *serverLog) Noticef(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if !strings.Contains(line, "Slow Consumer Detected") {
		return
	}
	name := ""
	if _, rest, ok := strings.Cut(line, ` - "`); ok {
		name, _, _ = strings.Cut(rest, `"`)
	}
	select {
	case l.cut <- name:
	default:
	}
}
func (l *serverLog) Warnf(string, ...any)  {}
func (l *serverLog) Fatalf(string, ...any) {}
func (l *serverLog) Errorf(string, ...any) {}
func (l *serverLog) Debugf(string, ...any) {}
func (l *serverLog) Tracef(string, ...any) {}

// Issue 37 (Medium, a slow consumer never stalls a live run): open inbox
// streams (each reads every decision published) and large decisions
// flood the connection they arrive on while its client reads slowly (a
// proxy stalls), and the server cuts it as a slow consumer. The faces of
// agent serve have a connection of their own: it is cut, and the runs'
// connection, which carries their tasks' results, is not cut at all; the
// five live runs get their jobs' results, each job run once. Before the
// fix, the faces shared the runs' connection, which the flood cut. (The
// flood cuts the faces' connection however few times the streams read
// each decision: enough decisions fill the sockets' buffers and
// max_pending.)
func TestInboxFloodDoesNotCutTheRuns(t *testing.T) {
	srv := natstest.Start(t, natstest.MaxPayload(maxPayload), natstest.MaxPending(maxPending))
	proxy := natstest.NewProxy(t, srv.URL())
	r := newReplica(t, srv, proxy.URL())
	if name := r.served.Faces.Opts.Name; r.served.Faces == r.runs || name != "agent faces" {
		t.Fatalf("the faces' connection is %q, want one of its own named \"agent faces\"", name)
	}
	runsStatus := watchStatus(t, r.runs)
	facesStatus := watchStatus(t, r.served.Faces)
	cut := slowConsumers(t, srv)
	runs := r.startRuns(t, 5)

	r.openInboxStreams(t, 40)
	if err := r.served.Faces.Flush(); err != nil { // the streams' subscriptions are the server's
		t.Fatal(err)
	}
	proxy.Stall()
	flood(t, srv.Conn(t), func() string { return fmt.Sprintf("tools.decision.%s.%s", protocol.NewID(), protocol.NewID()) }, 64)
	if name := offloadtest.WaitOrTimeout(t, cut, "a slow consumer cut"); !strings.HasSuffix(name, ":agent faces") {
		t.Fatalf("the server cut %q as a slow consumer, want the faces' connection", name)
	}
	proxy.Resume()
	waitAway(t, facesStatus, false, "the faces' connection cut")
	waitAway(t, facesStatus, true, "the faces' connection back")

	r.finish(t, runs)
	select {
	case s := <-runsStatus:
		t.Fatalf("the runs' connection: %s; want it never cut", s)
	default:
	}
	if n := r.runs.Stats().Reconnects; n != 0 {
		t.Fatalf("the runs' connection reconnected %d times, want never", n)
	}
}

// Issue 37 (Medium, a slow consumer never stalls a live run): the server
// cuts the runs' connection as a slow consumer (made slow by the test: a
// proxy stalls while many subscriptions of it receive large messages)
// and it stays away while the five live runs' jobs finish and their
// results are stored. When it is back, every run gets its job's real
// result at once, never DeadlineExceeded, each job run once. Before the
// fix, the results consumers, recreated by the client from "new messages
// only", skipped the results stored meanwhile: the runs waited out the
// call timeout and told the model DeadlineExceeded.
func TestRunsGetResultsStoredWhileCut(t *testing.T) {
	srv := natstest.Start(t, natstest.MaxPayload(maxPayload), natstest.MaxPending(maxPending))
	proxy := natstest.NewProxy(t, srv.URL())
	r := newReplica(t, srv, proxy.URL())
	runsStatus := watchStatus(t, r.runs)
	cut := slowConsumers(t, srv)
	runs := r.startRuns(t, 5)

	var subs []*nats.Subscription
	for range 40 {
		sub, err := r.runs.Subscribe("flood", func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := r.runs.Flush(); err != nil {
		t.Fatal(err)
	}
	results := make(chan *nats.Msg, 16)
	watcher := srv.Conn(t)
	if _, err := watcher.ChanSubscribe("tools.result.>", results); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	proxy.Stall()
	flood(t, watcher, func() string { return "flood" }, 5)
	if name := offloadtest.WaitOrTimeout(t, cut, "a slow consumer cut"); !strings.HasSuffix(name, ":agent") {
		t.Fatalf("the server cut %q as a slow consumer, want the runs' connection", name)
	}
	proxy.Cut() // the runs' connection kept away while the results are stored
	waitAway(t, runsStatus, false, "the runs' connection cut")
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	r.release()
	for range runs {
		offloadtest.WaitOrTimeout(t, results, "a job's result stored")
	}
	proxy.Restore()
	waitAway(t, runsStatus, true, "the runs' connection back")
	r.check(t, runs)
}
