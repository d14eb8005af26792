package agent

// This file holds what goes into one model request: the instructions, the
// hooks' additions, the tools offered, the wire form of the history, and
// the request and token limits checked around it.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

func (r *run) instructions() string {
	texts := []string{}
	if r.a.cfg.Instructions != "" {
		texts = append(texts, r.a.cfg.Instructions)
	}
	for _, c := range r.caps {
		if p, ok := c.(InstructionsProvider); ok {
			// Several capabilities of one kind give the same text once.
			if s := p.Instructions(); s != "" && !slices.Contains(texts, s) {
				texts = append(texts, s)
			}
		}
	}
	return strings.Join(texts, "\n\n")
}

// request sends req (plus queued asap messages) to the model and records the
// response. An IdleHook, asked while req carries nothing, may end the run
// instead: request then returns its Idle and sends nothing.
func (r *run) request(ctx context.Context, req message.Message) (message.Message, Idle, error) {
	// The hooks see the whole request; what they add goes before the
	// run's prompt when the request ends with it.
	promptAt := -1
	if r.promptLast && len(req.Parts) > 0 {
		promptAt = len(req.Parts) - 1
	}
	r.promptLast = false
	for _, c := range r.caps {
		var idle Idle
		var err error
		if h, ok := c.(ModelRequestHook); ok {
			err = h.BeforeModelRequest(ctx, r.info, &req)
		}
		if h, ok := c.(IdleHook); ok && err == nil && len(req.Parts) == 0 {
			// Nothing to send yet (a resumed run whose tasks still run):
			// the hook may wait for something.
			idle, err = h.WhenIdle(ctx, r.info)
			req.Parts = append(req.Parts, idle.Parts...)
		}
		if err != nil || idle.Pause || idle.Suspend {
			// The run ends here; the results req carries stay in the
			// history, so that a continued history does not run their
			// calls again.
			r.keep(promptLastOf(req, promptAt))
			return message.Message{}, idle, err
		}
	}
	req = promptLastOf(req, promptAt)
	queued := r.state.takeAsap()
	if len(req.Parts) > 0 {
		r.appendMessage(req)
	}
	for _, q := range queued {
		r.appendMessage(message.NewRequest(message.UserPrompt{Content: q}))
	}

	usage := r.state.usageSnapshot()
	if max := r.requestLimit(); max >= 0 && usage.Requests >= max {
		return message.Message{}, Idle{}, &UsageLimitExceeded{Limit: "request_limit", Max: max, Count: usage.Requests + 1}
	}
	tools, err := r.tools(ctx)
	if err != nil {
		return message.Message{}, Idle{}, err
	}
	lreq := &llm.Request{Messages: r.state.wireHistory(), Settings: r.a.cfg.Settings}
	lreq.OnRetry = r.onRetry
	if len(tools) > 0 {
		lreq.Tools = make([]llm.ToolDef, 0, len(tools))
	}
	for _, t := range tools {
		lreq.Tools = append(lreq.Tools, llm.ToolDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	r.emit(Event{Type: EventModelRequestStarted})
	mctx, span := r.startModelSpan(ctx, r.a.cfg.Model.Name())
	var resp *llm.Response
	if r.a.cfg.Stream {
		resp, err = r.a.cfg.Model.Stream(mctx, lreq, func(d llm.Delta) {
			if d.Text != "" {
				r.emit(Event{Type: EventTextDelta, Delta: d.Text})
			}
		})
	} else {
		resp, err = r.a.cfg.Model.Generate(mctx, lreq)
	}
	endModelSpan(span, resp, err)
	r.state.addRequest()
	if err != nil {
		return message.Message{}, Idle{}, fmt.Errorf("model %s: %w", r.a.cfg.Model.Name(), err)
	}
	m := message.NewResponse(resp.Parts...)
	m.ModelName, m.FinishReason, m.Usage = resp.ModelName, resp.FinishReason, resp.Usage
	if m.ModelName == "" {
		m.ModelName = r.a.cfg.Model.Name()
	}
	usage = r.state.addTokens(resp.Usage)
	r.appendMessage(m)
	if err := r.checkTokens(usage); err != nil {
		return message.Message{}, Idle{}, err
	}
	return r.state.message(r.state.lastIndex()), Idle{}, nil
}

// promptLastOf moves the part at promptAt (the run's prompt) behind the
// parts the hooks appended after it; promptAt < 0 leaves req as it is.
func promptLastOf(req message.Message, promptAt int) message.Message {
	if promptAt < 0 || promptAt >= len(req.Parts)-1 {
		return req
	}
	parts := make([]message.Part, 0, len(req.Parts))
	parts = append(parts, req.Parts[:promptAt]...)
	parts = append(parts, req.Parts[promptAt+1:]...)
	req.Parts = append(parts, req.Parts[promptAt])
	return req
}

// onRetry reports a model request's retry as an event.
func (r *run) onRetry(rt llm.Retry) {
	r.emit(Event{Type: EventModelRequestRetry, Attempt: rt.Attempt, Reason: rt.Reason})
}

func (r *run) requestLimit() int {
	if r.limits.Requests == nil {
		return DefaultRequestLimit
	}
	return *r.limits.Requests
}

func (r *run) checkTokens(u message.Usage) error {
	check := func(limit *int, name string, n int) error {
		if limit != nil && n > *limit {
			return &UsageLimitExceeded{Limit: name, Max: *limit, Count: n}
		}
		return nil
	}
	// The first limit exceeded is the error: one clear message.
	if err := check(r.limits.InputTokens, "input_tokens_limit", u.InputTokens); err != nil {
		return err
	}
	if err := check(r.limits.OutputTokens, "output_tokens_limit", u.OutputTokens); err != nil {
		return err
	}
	return check(r.limits.TotalTokens, "total_tokens_limit", u.TotalTokens())
}

// tools returns the tools of this step: every toolset's, prepared by the
// capabilities. Duplicate names are an error.
func (r *run) tools(ctx context.Context) ([]*tool.Tool, error) {
	var all []*tool.Tool
	for _, ts := range r.a.cfg.Toolsets {
		tools, err := ts.Tools(ctx)
		if err != nil {
			return nil, fmt.Errorf("agent: list tools: %w", err)
		}
		all = append(all, tools...)
	}
	if name, dup := duplicateName(all); dup {
		return nil, &UserError{Message: fmt.Sprintf("agent: tool name %q is offered by more than one toolset", name)}
	}
	for _, c := range r.caps {
		if p, ok := c.(ToolsPreparer); ok {
			var err error
			if all, err = p.PrepareTools(ctx, r.info, all); err != nil {
				return nil, err
			}
		}
	}
	return all, nil
}

// duplicateName returns the first name that two of tools share, if any.
func duplicateName(tools []*tool.Tool) (string, bool) {
	if len(tools) <= 16 {
		for i, t := range tools {
			for _, u := range tools[:i] {
				if u.Name == t.Name {
					return t.Name, true
				}
			}
		}
		return "", false
	}
	seen := make(map[string]bool, len(tools))
	for _, t := range tools {
		if seen[t.Name] {
			return t.Name, true
		}
		seen[t.Name] = true
	}
	return "", false
}

// wireMessages prepares the history for the model: consecutive requests are
// merged (a paused run's trailing request and the resume's request, queued
// messages), and in every request tool results come before other parts, as
// OpenAI-compatible APIs require tool messages right after the assistant
// message that called them. A history that needs neither is returned as
// it is (capped, so that appending to it copies it).
func wireMessages(h message.History) []message.Message {
	if wireReady(h) {
		return h[:len(h):len(h)]
	}
	out := make([]message.Message, 0, len(h))
	for _, m := range h {
		if n := len(out); n > 0 && m.Role == message.RoleRequest && out[n-1].Role == message.RoleRequest {
			prev := out[n-1]
			prev.Parts = append(slices.Clone(prev.Parts), m.Parts...)
			out[n-1] = prev
			continue
		}
		out = append(out, m)
	}
	for i, m := range out {
		if m.Role != message.RoleRequest || resultsFirst(m.Parts) {
			continue
		}
		var results, rest []message.Part
		for _, p := range m.Parts {
			switch x := p.(type) {
			case message.ToolReturn:
				results = append(results, p)
			case message.RetryPrompt:
				if x.ToolCallID != "" {
					results = append(results, p)
					continue
				}
				rest = append(rest, p)
			default:
				rest = append(rest, p)
			}
		}
		m.Parts = append(results, rest...)
		out[i] = m
	}
	return out
}

// wireReady reports whether wireMessages would leave h as it is: no two
// requests in a row, and tool results first in every request.
func wireReady(h message.History) bool {
	for i, m := range h {
		if m.Role != message.RoleRequest {
			continue
		}
		if i > 0 && h[i-1].Role == message.RoleRequest || !resultsFirst(m.Parts) {
			return false
		}
	}
	return true
}

// resultsFirst reports whether no tool result (a tool return, or a retry
// prompt answering a call) follows another part in parts: wireMessages
// leaves such a request as it is.
func resultsFirst(parts []message.Part) bool {
	other := false
	for _, p := range parts {
		result := false
		switch x := p.(type) {
		case message.ToolReturn:
			result = true
		case message.RetryPrompt:
			result = x.ToolCallID != ""
		}
		if result && other {
			return false
		}
		other = other || !result
	}
	return true
}
