// Shared helpers of the scenarios: scripted models, response builders,
// the events recorder, gated tools and bounded waits.

package bgtest

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// turnFunc answers model request n (from 0) given the request.
type turnFunc func(n int, req *llm.Request) *llm.Response

// untilFollowUps answers first, then "done" once req carries k follow-ups
// ("waiting" before).
func untilFollowUps(k int, first *llm.Response) turnFunc {
	return func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return first
		case len(followUps(req)) >= k:
			return text("done")
		default:
			return text("waiting")
		}
	}
}

// recorder is a scripted model that records what it was sent.
type recorder struct {
	mu   sync.Mutex
	reqs []*llm.Request
	fn   turnFunc
}

func newModel(fn turnFunc) (*script.FuncModel, *recorder) {
	rec := &recorder{fn: fn}
	return script.New("bgtest", func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		rec.mu.Lock()
		n := len(rec.reqs)
		rec.reqs = append(rec.reqs, req)
		rec.mu.Unlock()
		return rec.fn(n, req), nil
	}), rec
}

func (r *recorder) requests() []*llm.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*llm.Request(nil), r.reqs...)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func text(s string) *llm.Response {
	return &llm.Response{Parts: []message.Part{message.Text{Content: s}}}
}

func calls(cs ...message.ToolCall) *llm.Response {
	r := &llm.Response{}
	for _, c := range cs {
		r.Parts = append(r.Parts, c)
	}
	return r
}

func call(name, id, args string) message.ToolCall {
	return message.ToolCall{ToolName: name, ToolCallID: id, Args: args}
}

// setup builds an agent over h's toolset with one BackgroundTools
// capability using h's executor (or the capabilities caps builds).
type setup struct {
	cfg  agent.Config
	caps func(exec background.Executor) []agent.Capability
}

func newAgent(t *testing.T, h Harness, m llm.Model, s setup, tools ...*tool.Tool) *agent.Agent {
	t.Helper()
	ts, exec := h.New(t, tools...)
	cfg := s.cfg
	cfg.Model = m
	cfg.Toolsets = append(cfg.Toolsets, ts)
	if s.caps != nil {
		cfg.Capabilities = append(cfg.Capabilities, s.caps(exec)...)
	} else {
		cfg.Capabilities = append(cfg.Capabilities, background.Tools(background.Config{Executor: exec}))
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runCtx returns a context that ends the run after Timeout.
func runCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// closer returns a function closing ch once.
func closer(ch chan struct{}) func() {
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

var ackRE = regexp.MustCompile(`^Tool '([A-Za-z0-9_-]+)' is running in the background as task ([0-9A-Z]{26})\. Its result will arrive later as a follow-up message; continue with other work meanwhile\.$`)

// acks returns the task IDs of the acknowledgements in req, by tool call
// ID.
func acks(req *llm.Request) map[string]string {
	out := map[string]string{}
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			if r, ok := p.(message.ToolReturn); ok {
				if mm := ackRE.FindStringSubmatch(r.ModelText()); mm != nil {
					out[r.ToolCallID] = mm[2]
				}
			}
		}
	}
	return out
}

// followUps returns the follow-up user messages in req, in order.
func followUps(req *llm.Request) []message.UserPrompt {
	var out []message.UserPrompt
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			if u, ok := p.(message.UserPrompt); ok && len(u.Content) > 0 && strings.HasPrefix(u.Content[0].Text, "Background tool '") {
				out = append(out, u)
			}
		}
	}
	return out
}

// followUpTexts returns the first text of each follow-up in req.
func followUpTexts(req *llm.Request) []string {
	var out []string
	for _, u := range followUps(req) {
		out = append(out, u.Content[0].Text)
	}
	return out
}

// toolReturns returns the model texts of the tool returns in req, by tool
// call ID.
func toolReturns(req *llm.Request) map[string]string {
	out := map[string]string{}
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			switch r := p.(type) {
			case message.ToolReturn:
				out[r.ToolCallID] = r.ModelText()
			case message.RetryPrompt:
				out[r.ToolCallID] = r.ModelText()
			}
		}
	}
	return out
}

// hasFollowUp reports whether req carries a follow-up starting with
// prefix.
func hasFollowUp(req *llm.Request, prefix string) bool {
	for _, s := range followUpTexts(req) {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// events collects a run's events, safe for the concurrent emitters.
type events struct {
	mu  sync.Mutex
	all []agent.Event
	on  func(agent.Event)
}

func (e *events) add(ev agent.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	on := e.on
	e.mu.Unlock()
	if on != nil {
		on(ev)
	}
}

func (e *events) ofType(typ agent.EventType) []agent.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []agent.Event
	for _, ev := range e.all {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// bg is the metadata of a tool that always runs in the background.
func bg() tool.Option { return tool.Meta(map[string]any{"background": true}) }

// optional is the metadata of an optional background tool.
func optional() tool.Option { return tool.Meta(map[string]any{"background": "optional"}) }

// gated returns a background tool that answers result once gate is
// closed; started is closed when it starts (if not nil).
func gated(name, result string, gate <-chan struct{}, started chan struct{}, opts ...tool.Option) *tool.Tool {
	var once sync.Once
	return tool.Func(name, "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		if started != nil {
			once.Do(func() { close(started) })
		}
		select {
		case <-gate:
			return result, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, opts...)
}

// untilCancelled returns a background tool that closes started when it
// starts, blocks until its context ends, then calls onCancel (if not nil)
// and returns the context's error: a live task that only the run's end
// stops.
func untilCancelled(name string, started chan struct{}, onCancel func()) *tool.Tool {
	return tool.Func(name, "", func(ctx context.Context, _ *tool.RunContext, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		if onCancel != nil {
			onCancel()
		}
		return "", ctx.Err()
	}, bg())
}

// stopOnceStarted answers the first model request with one call of tool
// name (call ID c1); every later request waits for started, calls stop
// (which ends the run from outside) and answers "waiting".
func stopOnceStarted(name string, started <-chan struct{}, stop func()) turnFunc {
	return func(n int, _ *llm.Request) *llm.Response {
		if n == 0 {
			return calls(call(name, "c1", "{}"))
		}
		<-started
		stop()
		return text("waiting")
	}
}

// releaseAfter answers the first model request with calls of first (call
// ID c1) and second (c2) in one response; it calls release once first's
// follow-up arrived and answers "done" once second's did ("waiting"
// otherwise). second is meant to be gated on release.
func releaseAfter(first, second string, release func()) turnFunc {
	return func(n int, req *llm.Request) *llm.Response {
		switch {
		case n == 0:
			return calls(call(first, "c1", "{}"), call(second, "c2", "{}"))
		case hasFollowUp(req, "Background tool '"+second+"'"):
			return text("done")
		case hasFollowUp(req, "Background tool '"+first+"'"):
			release()
		}
		return text("waiting")
	}
}

// runOneCall runs an agent over tl whose model calls tl once (call ID c1,
// no arguments) and answers "done" once one follow-up arrived. It fails
// the test unless the run succeeds and returns the model's requests.
func runOneCall(t *testing.T, h Harness, tl *tool.Tool) []*llm.Request {
	t.Helper()
	m, rec := newModel(untilFollowUps(1, calls(call(tl.Name, "c1", "{}"))))
	if _, err := newAgent(t, h, m, setup{}, tl).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	return rec.requests()
}

// approveMe returns the tool approve_me, which needs approval: calling it
// pauses the run.
func approveMe() *tool.Tool {
	return tool.Func("approve_me", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "approved", nil }, tool.NeedsApproval())
}

// withHandler is the setup of a run that may pause on deferred calls,
// with handler deciding them.
func withHandler(handler agent.Capability) setup {
	return setup{cfg: agent.Config{AllowDeferred: true, Capabilities: []agent.Capability{handler}}}
}
