package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	servelib "github.com/offload-dev/offload/pkg/natsjs/serve"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
)

// The figures of agent serve (SPEC §11, issue 25): wake latency (a
// decision stored → the continuation's model request) against a raw
// publish → subscriber; paused conversations approved at once and
// continued by two replicas, each exactly once; a replica's memory with
// many paused conversations in the store.

// serveWorld counts what the replicas' agent does, across replicas.
type serveWorld struct {
	ep            endpoint
	mu            sync.Mutex
	continuations map[string]int // target → continuation model requests
	deploys       map[string]int
	requested     chan time.Time // each continuation's model request
	finals        chan service.Final
}

type benchTarget struct {
	Target string `json:"target"`
}

// agent is the replicas' agent: "deploy X" calls the approval-gated
// deploy with target X; a tool's return is answered with text.
func (w *serveWorld) agent() (*agent.Agent, error) {
	model := script.New("serve-bench", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				content := message.ContentText(x.Content)
				w.mu.Lock()
				w.continuations[content[strings.LastIndex(content, " ")+1:]]++
				w.mu.Unlock()
				select {
				case w.requested <- time.Now():
				default:
				}
				return &llm.Response{Parts: []message.Part{message.Text{Content: "done"}}}, nil
			case message.UserPrompt:
				_, target, _ := strings.Cut(x.Content[0].Text, " ")
				args, _ := json.Marshal(benchTarget{target})
				return &llm.Response{Parts: []message.Part{message.ToolCall{ToolName: "deploy", ToolCallID: "call_1", Args: string(args)}}}, nil
			}
		}
		return &llm.Response{Parts: []message.Part{message.Text{Content: "nothing"}}}, nil
	})
	deploy := tool.Func("deploy", "Deploy.", func(_ context.Context, _ *tool.RunContext, a benchTarget) (string, error) {
		w.mu.Lock()
		w.deploys[a.Target]++
		w.mu.Unlock()
		return "deployed " + a.Target, nil
	}, tool.NeedsApproval())
	set, err := tool.NewSet(deploy)
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Config{Model: model, Toolsets: []tool.Toolset{set}, AllowDeferred: true})
}

// replica is one serve replica on a connection of its own.
type benchReplica struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	srv *agentproc.Served
	svc *servelib.Service
	st  *convstore.Store
}

// replica starts a replica as agent serve's wiring does (agentproc), its
// agent the bench's.
func (w *serveWorld) replica(ctx context.Context, name string) (*benchReplica, error) {
	nc, err := w.ep.connect(name)
	if err != nil {
		return nil, err
	}
	a, err := w.agent()
	if err != nil {
		nc.Close()
		return nil, err
	}
	p, err := agentproc.Open(ctx, agentproc.Options{Conn: nc, Conversations: true})
	if err != nil {
		nc.Close()
		return nil, err
	}
	srv, err := p.Service(ctx, agentproc.ServeOptions{Agents: []servelib.Agent{{Name: "ops", Agent: a}}, Holder: name,
		Service: func(c *servelib.Config) { c.OnFinal = func(f service.Final) { w.finals <- f } }})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &benchReplica{nc: nc, js: p.JetStream, srv: srv, svc: srv.Service, st: p.Conversations.Store}, nil
}

func (r *benchReplica) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.srv.Stop(ctx)
	r.nc.Close()
}

// pause starts n conversations on r, 16 at a time, each paused on its
// approval, and returns them as decision subjects by target.
func (w *serveWorld) pause(ctx context.Context, r *benchReplica, prefix string, n int) (map[string]string, error) {
	out := map[string]string{}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		target := fmt.Sprintf("%s%d", prefix, i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			run, err := r.svc.StartConversation(ctx, "ops", "deploy "+target, "")
			if err == nil {
				<-run.Done()
				if f := run.Final(); f.Status != "paused" || len(f.Pending) != 1 {
					err = fmt.Errorf("conversation %s: %+v, want paused on one approval", target, f)
				} else {
					mu.Lock()
					out[target] = protocol.Subjects{}.Decision(f.ConversationID, f.Pending[0].TaskID)
					mu.Unlock()
				}
			}
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for range n {
		<-w.finals // the pauses' own
	}
	return out, firstErr
}

var approved = []byte(`{"approved":true,"by":"bench"}`)

// measureServe prints the serve figures and returns the verdicts. The
// section has a server and store of its own (in dir), as a deployment
// of agent serve has streams of its own traffic: on the other sections'
// server, the wake consumers it creates would first work through their
// backlog, every result of those sections' calls, while the wakes are
// timed.
func measureServe(ctx context.Context, dir string, out io.Writer, wakes, approve, paused int) ([]bool, error) {
	proc, err := startServer(ctx, filepath.Join(dir, "serve"))
	if err != nil {
		return nil, err
	}
	defer proc.stop()
	ep := endpoint{url: proc.srv.URL(), nkey: proc.srv.NkeySeedFile()}
	w := &serveWorld{ep: ep, continuations: map[string]int{}, deploys: map[string]int{},
		requested: make(chan time.Time, 1), finals: make(chan service.Final, approve+wakes+16)}
	r1, err := w.replica(ctx, "serve-1")
	if err != nil {
		return nil, err
	}
	defer r1.close()

	// Wake latency, one conversation at a time, against a core NATS
	// publish → subscriber on two connections.
	subjects, err := w.pause(ctx, r1, "w", wakes)
	if err != nil {
		return nil, err
	}
	var wake []time.Duration
	for _, subj := range subjects {
		t0 := time.Now()
		if _, err := r1.js.Publish(ctx, subj, approved); err != nil {
			return nil, err
		}
		wake = append(wake, (<-w.requested).Sub(t0))
		<-w.finals
	}
	raw, err := rawPubSub(ep, wakes)
	if err != nil {
		return nil, err
	}
	wl, rl := percentiles(wake), percentiles(raw)
	fmt.Fprintf(out, "Wake latency (decision published and stored → the continuation's model request, on a replica, on a server of this section's own; %d wakes): p50 %s p99 %s; raw nats.go publish → subscriber: p50 %s p99 %s\n",
		wakes, wl.p50.Round(10*time.Microsecond), wl.p99.Round(10*time.Microsecond), rl.p50.Round(time.Microsecond), rl.p99.Round(time.Microsecond))
	results := []bool{verdictIn(out, "wake p50", float64(wl.p50)/float64(time.Millisecond), "ms", "≤", 5)}

	// Paused conversations approved at once, continued by two replicas.
	tp := time.Now()
	subjects, err = w.pause(ctx, r1, "t", approve)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "(%d conversations started and paused, 16 at a time, in %s)\n", approve, time.Since(tp).Round(time.Millisecond))
	r2, err := w.replica(ctx, "serve-2")
	if err != nil {
		return nil, err
	}
	defer r2.close()
	t0 := time.Now()
	for _, subj := range subjects {
		if _, err := r1.js.PublishAsync(subj, approved); err != nil {
			return nil, err
		}
	}
	finished := 0
	for finished < approve {
		select {
		case <-w.finals:
			finished++
			continue
		case <-time.After(time.Minute):
		}
		break
	}
	elapsed := time.Since(t0)
	once := 0
	w.mu.Lock()
	for target := range subjects {
		if w.continuations[target] == 1 && w.deploys[target] == 1 {
			once++
		}
	}
	w.mu.Unlock()
	if finished < approve {
		fmt.Fprintf(out, "%d paused conversations approved at once, continued by 2 replicas: %d finished (%d exactly once), then none for a minute\n", approve, finished, once)
	} else {
		fmt.Fprintf(out, "%d paused conversations approved at once, continued by 2 replicas: %d exactly once, in %s (%.0f conversations/s)\n",
			approve, once, elapsed.Round(time.Millisecond), float64(approve)/elapsed.Seconds())
	}
	results = append(results, verdict(out, "conversations continued exactly once / all", float64(once)/float64(approve), "≥", 1))
	r2.close()
	r1.close()

	// A replica's memory with many paused conversations in the store.
	empty, err := w.pausedMemory(ctx, 0)
	if err != nil {
		return nil, err
	}
	pm, err := w.pausedMemory(ctx, paused)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "A replica started over %d paused conversations in the store: heap +%.1f KiB (an empty store: +%.1f KiB), goroutines +%d (an empty store: +%d), durable consumers on the wake streams %d, conversations held 0\n",
		paused, float64(pm.heap)/1024, float64(empty.heap)/1024, pm.goroutines, empty.goroutines, pm.consumers)
	per := float64(pm.heap-empty.heap) / float64(paused)
	results = append(results, verdictIn(out, "heap per paused conversation", per, "B", "≤", 16))
	return results, nil
}

// rawPubSub measures n core NATS publish → subscriber deliveries.
func rawPubSub(ep endpoint, n int) ([]time.Duration, error) {
	pub, err := ep.connect("serve-raw-pub")
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	sub, err := ep.connect("serve-raw-sub")
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	got := make(chan time.Time, 1)
	s, err := sub.Subscribe("bench.serve.raw", func(*nats.Msg) { got <- time.Now() })
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Unsubscribe() }()
	if err := sub.Flush(); err != nil {
		return nil, err
	}
	out := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		if err := pub.Publish("bench.serve.raw", approved); err != nil {
			return nil, err
		}
		out[i] = (<-got).Sub(t0)
	}
	return out, nil
}

type pausedMem struct {
	heap       int64
	goroutines int
	consumers  int
}

// pausedMemory stores n paused conversations (as a pause saves them) and
// measures what starting a replica over them adds to this process.
func (w *serveWorld) pausedMemory(ctx context.Context, n int) (pausedMem, error) {
	nc, err := w.ep.connect("serve-store")
	if err != nil {
		return pausedMem{}, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := convstore.New(ctx, convstore.Config{JetStream: js})
	if err != nil {
		return pausedMem{}, err
	}
	for i := range n {
		id, task := protocol.NewID(), protocol.NewID()
		s := &conversation.State{ID: id, Agent: &conversation.AgentRef{Name: "ops"},
			History: message.History{
				{Role: message.RoleRequest, Parts: []message.Part{message.UserPrompt{Content: []message.Content{{Text: fmt.Sprintf("deploy p%d", i)}}}}},
				{Role: message.RoleResponse, Parts: []message.Part{message.ToolCall{ToolName: "deploy", ToolCallID: "call_1", Args: `{"target":"p"}`}}},
			},
			Pending: &deferred.PendingRecord{ConversationID: id, Tasks: []deferred.PendingTask{{TaskID: task, Kind: deferred.KindApproval, Tool: "deploy", ToolCallID: "call_1", Args: json.RawMessage(`{"target":"p"}`)}}}}
		if _, err := st.Save(ctx, s, 0); err != nil {
			return pausedMem{}, err
		}
	}
	g0, h0 := runtime.NumGoroutine(), heapAfterGC()
	r, err := w.replica(ctx, "serve-paused")
	if err != nil {
		return pausedMem{}, err
	}
	defer r.close()
	// Let the replica settle (its wake consumers bound, nothing to wake).
	time.Sleep(time.Second)
	pm := pausedMem{heap: int64(heapAfterGC()) - int64(h0), goroutines: runtime.NumGoroutine() - g0} //nolint:gosec // G115: heap sizes
	// The durable consumers of the wake streams: the wake consumers, none
	// per conversation (the inbox's short-lived ordered consumers of
	// earlier reads are not counted).
	for _, stream := range natsjs.WakeStreams("") {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return pausedMem{}, err
		}
		infos := s.ListConsumers(ctx)
		for ci := range infos.Info() {
			if ci.Config.Durable != "" {
				pm.consumers++
			}
		}
	}
	return pm, nil
}
