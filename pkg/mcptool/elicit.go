package mcptool

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/offload-dev/offload/pkg/tool"
)

// Metadata keys of an elicitation's deferral (SPEC §16).
const (
	// MetaElicitation is the deferral's metadata key of the server's
	// elicitation: {"message", "requestedSchema"} (form mode), or
	// {"message", "elicitationId"} with MetaURL (URL mode).
	MetaElicitation = "mcp.elicitation"
	// MetaURL is the deferral's metadata key of a URL-mode elicitation's
	// URL, the page a person opens.
	MetaURL = "mcp.url"
)

// relatedTaskKey is the _meta key of the MCP task a server's request is
// about (2025-11-25).
const relatedTaskKey = "io.modelcontextprotocol/related-task"

// elicitationCapability is what the client declares of elicitation: form
// and URL mode, both answered by a person through the conversation's
// pending external calls.
func elicitationCapability() *mcp.ElicitationCapability {
	return &mcp.ElicitationCapability{Form: &struct{}{}, URL: &struct{}{}}
}

// flight is a call in flight on a connection. It runs on a context of its
// own, so that it outlives the offload attempt that started it when a
// server's elicitation parks it until a person answers.
type flight struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	asks   chan *elicitation // the server's elicitations for the call
	done   chan outcome      // its outcome, once (buffered)

	mu      sync.Mutex
	mcpTask string // the MCP task of the call, once created
}

// outcome is what a call ended with.
type outcome struct {
	v   any
	err error
}

// elicitation is one elicitation/create of the server, waiting for its
// answer.
type elicitation struct {
	params json.RawMessage
	reply  chan map[string]any // the ElicitResult (buffered)
}

// parkedCall is a call whose server waits for an elicitation's answer,
// by the offload task that is to bring it (its next attempt).
type parkedCall struct {
	f     *flight
	ask   *elicitation
	timer *time.Timer
}

// flightKey carries a call's flight in its context (for followTask).
type flightKey struct{}

// setTask records the MCP task of the call in ctx, so that the server's
// requests about that task reach it.
func setTask(ctx context.Context, taskID string) {
	if f, ok := ctx.Value(flightKey{}).(*flight); ok {
		f.mu.Lock()
		f.mcpTask = taskID
		f.mu.Unlock()
	}
}

// fly runs body as a call in flight on c, on a context that keeps ctx's
// values but not its end: await ties the two while it waits.
func (s *Server) fly(ctx context.Context, c *conn, body func(context.Context) (any, error)) *flight {
	fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	f := &flight{cancel: cancel, asks: make(chan *elicitation), done: make(chan outcome, 1)}
	f.ctx = context.WithValue(fctx, flightKey{}, f)
	c.flights.Store(f, struct{}{})
	// Stop ends the call's requests (they end with the server's context),
	// and so the call.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel(nil)
		defer c.flights.Delete(f)
		v, err := body(f.ctx)
		f.done <- outcome{v, err}
	}()
	return f
}

// await waits for f's outcome while ctx (the attempt's) lasts; its end
// cancels the call. An elicitation of the server parks the call and
// defers the offload call to a person: taskID's next attempt brings the
// answer (answer).
func (s *Server) await(ctx context.Context, taskID string, timeout time.Duration, f *flight) (any, error) {
	stop := context.AfterFunc(ctx, func() { f.cancel(context.Cause(ctx)) })
	for {
		var ask *elicitation
		select {
		case o := <-f.done:
			stop()
			return o.v, o.err
		case ask = <-f.asks:
		}
		if taskID == "" {
			// No task to bring an answer (a call outside a worker):
			// declined, and the call goes on.
			ask.reply <- map[string]any{"action": "decline"}
			continue
		}
		if !stop() {
			// The attempt ended meanwhile: the call is cancelled.
			ask.reply <- map[string]any{"action": "cancel"}
			o := <-f.done
			return o.v, o.err
		}
		p := &parkedCall{f: f, ask: ask}
		s.pmu.Lock()
		s.parked[taskID] = p
		// A person who never answers: the call ends after the tool's
		// timeout, and the server is told.
		p.timer = time.AfterFunc(timeout, func() {
			if s.unpark(taskID, p) {
				s.log.Info("elicitation unanswered: the MCP call is cancelled", slog.String("task_id", taskID))
				f.cancel(&TimeoutError{Timeout: timeout})
			}
		})
		s.pmu.Unlock()
		s.log.Info("elicitation: the MCP call waits for a person's answer", slog.String("task_id", taskID))
		return nil, &tool.CallDeferred{Metadata: s.elicitationMeta(ask.params)}
	}
}

// unpark removes taskID's parked call if it is p (any, when p is nil) and
// reports whether it did.
func (s *Server) unpark(taskID string, p *parkedCall) bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	cur, ok := s.parked[taskID]
	if !ok || (p != nil && cur != p) {
		return false
	}
	delete(s.parked, taskID)
	return true
}

// answer returns a person's answer (the attempt's ToolCallMetadata
// tool.AnswerMetaKey) to the elicitation the call of taskID is parked on,
// and waits for the call to go on. A worker that does not hold the call
// (another replica; this one restarted) answers the effect unknown: the
// answer never starts a new call.
func (s *Server) answer(ctx context.Context, rc *tool.RunContext, ans any, timeout time.Duration) (any, error) {
	s.pmu.Lock()
	p := s.parked[rc.TaskID]
	delete(s.parked, rc.TaskID)
	s.pmu.Unlock()
	if p == nil {
		return nil, &tool.ApprovalRequired{Metadata: map[string]any{
			tool.EffectMetaKey: tool.EffectUnknown,
			MetaServer:         s.cfg.Name,
			"reason":           "the answer to the MCP server's elicitation came to a worker that does not hold the call (another replica, or one restarted): the call's outcome is unknown",
		}}
	}
	p.timer.Stop()
	p.ask.reply <- elicitResult(ans)
	s.log.Info("elicitation answered: the MCP call goes on", slog.String("task_id", rc.TaskID))
	return s.await(ctx, rc.TaskID, timeout, p.f)
}

// elicitResult is the ElicitResult of an answer: {"action":"accept",
// "content":{…}}, {"action":"decline"} or {"action":"cancel"}.
func elicitResult(ans any) map[string]any {
	m, _ := ans.(map[string]any)
	switch action, _ := m["action"].(string); action {
	case "accept":
		out := map[string]any{"action": "accept"}
		if c, ok := m["content"]; ok && c != nil {
			out["content"] = c
		}
		return out
	case "cancel":
		return map[string]any{"action": "cancel"}
	default:
		return map[string]any{"action": "decline"}
	}
}

// elicitationMeta is the metadata of an elicitation's deferral: its
// answer goes to the next attempt, the server, and what a person is
// asked (SPEC §16).
func (s *Server) elicitationMeta(params json.RawMessage) map[string]any {
	var p struct {
		Mode            string `json:"mode"`
		Message         string `json:"message"`
		RequestedSchema any    `json:"requestedSchema"`
		URL             string `json:"url"`
		ElicitationID   string `json:"elicitationId"`
	}
	_ = json.Unmarshal(params, &p)
	md := map[string]any{tool.AnswerToMetaKey: tool.AnswerToNextAttempt, MetaServer: s.cfg.Name}
	e := map[string]any{"message": p.Message}
	if p.Mode == "url" {
		md[MetaURL] = p.URL
		if p.ElicitationID != "" {
			e["elicitationId"] = p.ElicitationID
		}
	} else if p.RequestedSchema != nil {
		e["requestedSchema"] = p.RequestedSchema
	}
	md[MetaElicitation] = e
	return md
}

// elicit takes an elicitation/create to the call it is for (the one of
// the MCP task it names, else the one call in flight on the connection)
// and answers it once a person did (await, answer). One that names no
// call in flight is refused.
func (s *Server) elicit(ctx context.Context, c *conn, r transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	params, _ := json.Marshal(r.Params)
	f := c.flightFor(params)
	if f == nil {
		s.log.Warn("elicitation refused: no single call in flight on the connection to ask it for")
		return transport.NewJSONRPCErrorResponse(r.ID, mcp.INVALID_REQUEST, "elicitation refused: this offload worker cannot tell which of its calls it is for (none, or several in flight on this connection)", nil), nil
	}
	ask := &elicitation{params: params, reply: make(chan map[string]any, 1)}
	select {
	case f.asks <- ask:
	case <-f.ctx.Done():
		return cancelResult(r.ID), nil
	case <-ctx.Done():
		return cancelResult(r.ID), nil
	}
	select {
	case res := <-ask.reply:
		raw, err := json.Marshal(res)
		if err != nil {
			return nil, err
		}
		return transport.NewJSONRPCResultResponse(r.ID, raw), nil
	case <-f.ctx.Done():
		return cancelResult(r.ID), nil
	}
}

// cancelResult is the ElicitResult of an elicitation whose call ended.
func cancelResult(id mcp.RequestId) *transport.JSONRPCResponse {
	return transport.NewJSONRPCResultResponse(id, json.RawMessage(`{"action":"cancel"}`))
}

// flightFor returns the call an elicitation with params is for: the one
// whose MCP task its _meta names, else the one call in flight; nil when
// it cannot be told.
func (c *conn) flightFor(params json.RawMessage) *flight {
	var p struct {
		Meta map[string]struct {
			TaskID string `json:"taskId"`
		} `json:"_meta"`
	}
	_ = json.Unmarshal(params, &p)
	related := p.Meta[relatedTaskKey].TaskID
	var only *flight
	n := 0
	var found *flight
	c.flights.Range(func(k, _ any) bool {
		f := k.(*flight)
		n++
		only = f
		if related != "" {
			f.mu.Lock()
			if f.mcpTask == related {
				found = f
			}
			f.mu.Unlock()
		}
		return true
	})
	switch {
	case found != nil:
		return found
	case n == 1:
		return only
	}
	return nil
}
