package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// Metadata keys of an MCP tool's registry entry (SPEC §16).
const (
	// MetaServer is the metadata key of the server's configured name.
	MetaServer = "mcp.server"
	// MetaAnnotations is the metadata key of the tool's MCP annotations.
	MetaAnnotations = "mcp.annotations"
	// MetaTaskSupport is the metadata key of the tool's
	// execution.taskSupport, when the server gives one.
	MetaTaskSupport = "mcp.task_support"
)

// Task support values of execution.taskSupport.
const (
	taskOptional = "optional"
	taskRequired = "required"
)

// Tools returns the offload tools of the server's listed tools (those of
// the allow-list), named <prefix><mcp name>: a name outside
// tool.NamePattern is an error naming the tool and the fix.
func (s *Server) Tools() ([]*tool.Tool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*tool.Tool, 0, len(s.listed))
	served := make(servedSet, len(s.listed))
	for _, t := range s.listed {
		ot, err := s.newTool(t)
		if err != nil {
			return nil, err
		}
		out = append(out, ot)
		served[t.Name] = servedTool{name: ot.Name, listing: listing(t)}
	}
	// What the worker serves from now on, until a change (Follow).
	s.served = served
	return out, nil
}

// newTool builds the offload tool of one MCP tool.
func (s *Server) newTool(t mcpTool) (*tool.Tool, error) {
	name, err := s.cfg.offloadName(t.Name)
	if err != nil {
		return nil, err
	}
	o := s.cfg.Overrides[t.Name]
	desc := t.Description
	if o.Description != "" {
		desc = o.Description
	}
	md := map[string]any{MetaServer: s.cfg.Name}
	if len(t.Annotations) > 0 {
		md[MetaAnnotations] = t.Annotations
	}
	if t.Execution != nil && t.Execution.TaskSupport != "" {
		md[MetaTaskSupport] = t.Execution.TaskSupport
	}
	if o.Background != nil {
		md["background"] = *o.Background
	}
	idempotent := hint(t.Annotations, "readOnlyHint") || hint(t.Annotations, "idempotentHint")
	if o.Idempotent != nil {
		idempotent = *o.Idempotent
	}
	params := t.InputSchema
	if len(params) == 0 || string(params) == "null" {
		params = nil
	}
	def := tool.Def{
		Name: name, Description: desc, Parameters: params, Metadata: md,
		Idempotent: idempotent, RequiresApproval: o.RequiresApproval != nil && *o.RequiresApproval,
	}
	timeout := s.cfg.timeout(t.Name)
	// Advertised (the registry entry's timeout): it bounds a background
	// call of the tool on the agent's side too (SPEC §20).
	opts := []tool.Option{tool.Timeout(timeout)}
	if l := s.cfg.limitsOf(t.Name); l != nil {
		opts = append(opts, tool.Limited(l))
	}
	ot, err := tool.New(def, s.handler(t.Name, timeout), opts...)
	if err != nil {
		return nil, fmt.Errorf("mcptool: mcp server %q: tool %q: %w", s.cfg.Name, t.Name, err)
	}
	return ot, nil
}

// hint reports whether the annotation key is true.
func hint(annotations map[string]any, key string) bool {
	v, ok := annotations[key].(bool)
	return ok && v
}

// TimeoutError is the outcome of a call that outlasted its timeout
// (timeout: of the server or of an override).
type TimeoutError struct {
	// Timeout is the timeout that ran out.
	Timeout time.Duration
}

// Error implements error.
func (e *TimeoutError) Error() string { return "MCP tool call timed out after " + e.Timeout.String() }

// MCPError is the outcome of a call the server answered with a JSON-RPC
// error: its code and message, never its data (server internals). A
// worker's result shows it as status error, error_type MCPError.
type MCPError struct {
	// Code is the JSON-RPC error code.
	Code int
	// Message is the server's message, cut to its first line and at most
	// 500 bytes.
	Message string
}

// Error implements error.
func (e *MCPError) Error() string { return fmt.Sprintf("MCP error %d: %s", e.Code, e.Message) }

// handler is the tool handler of the MCP tool name.
func (s *Server) handler(name string, timeout time.Duration) tool.HandlerFunc {
	return func(ctx context.Context, rc *tool.RunContext, args json.RawMessage) (any, error) {
		v, err := s.call(ctx, rc, name, args, timeout)
		s.opts.Metrics.call(s.cfg.Name, name, outcomeOf(err))
		return v, err
	}
}

// call runs one call of the MCP tool name: as an MCP task when the tool
// requires one, or supports one and the call runs in the background, or
// when the attempt's ledger entry records one (a resume); else a plain
// tools/call.
func (s *Server) call(ctx context.Context, rc *tool.RunContext, name string, args json.RawMessage, timeout time.Duration) (any, error) {
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, &TimeoutError{Timeout: timeout})
	defer cancel()
	v, err := s.callOnce(tctx, rc, name, args, timeout)
	if err != nil && ctx.Err() == nil && tctx.Err() != nil {
		var te *TimeoutError
		if errors.As(context.Cause(tctx), &te) {
			return nil, te
		}
	}
	return v, err
}

// callOnce makes the call in flight (fly) and waits for it (await); an
// attempt that brings a person's answer to the call's elicitation returns
// it to the call parked on it instead (answer).
func (s *Server) callOnce(ctx context.Context, rc *tool.RunContext, name string, args json.RawMessage, timeout time.Duration) (any, error) {
	if rc == nil {
		rc = &tool.RunContext{}
	}
	if ans, ok := rc.ToolCallMetadata[tool.AnswerMetaKey]; ok {
		return s.answer(ctx, rc, ans, timeout)
	}
	c, err := s.current(ctx)
	if err != nil {
		return nil, fault(ctx, err)
	}
	f := s.fly(ctx, c, func(ctx context.Context) (any, error) {
		if len(rc.Resume) > 0 {
			return s.resume(ctx, rc)
		}
		return s.callOn(ctx, rc, c, name, args)
	})
	return s.await(ctx, rc.TaskID, timeout, f)
}

// callOn makes one tools/call on c, following the MCP task it creates.
func (s *Server) callOn(ctx context.Context, rc *tool.RunContext, c *conn, name string, args json.RawMessage) (any, error) {
	info, _ := s.tool(name)
	support := ""
	if info.Execution != nil {
		support = info.Execution.TaskSupport
	}
	asTask := support == taskRequired || (support == taskOptional && rc.Background)
	token := "offload-progress-" + strconv.FormatInt(s.ids.Add(1), 10)
	c.progress.Store(token, progressTo(ctx))
	defer c.progress.Delete(token)
	params := map[string]any{
		"name":      name,
		"arguments": rawOrEmpty(args),
		"_meta":     map[string]any{"progressToken": token},
	}
	if asTask {
		params["task"] = map[string]any{}
	}
	s.log.Debug("tools/call", slog.String("tool", name), slog.Bool("task", asTask))
	raw, err := s.request(ctx, c, string(mcp.MethodToolsCall), params, asTask)
	if err != nil {
		return nil, s.callError(ctx, err)
	}
	if asTask {
		var created struct {
			Task *taskInfo `json:"task"`
		}
		if json.Unmarshal(raw, &created) == nil && created.Task != nil && created.Task.TaskID != "" {
			return s.followTask(ctx, rc, c, *created.Task, false)
		}
		// The server answered with the result itself.
	}
	return mapResult(raw)
}

// callError maps a request's error to the call's outcome.
func (s *Server) callError(ctx context.Context, err error) error {
	var rpc *RPCError
	switch {
	case errors.As(err, &rpc):
		return &MCPError{Code: rpc.Code, Message: clean(rpc.Message)}
	case ctx.Err() != nil:
		return context.Cause(ctx)
	default:
		return fault(ctx, err)
	}
}

// fault makes err a worker fault (the task handed back) unless the
// call's context ended.
func fault(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if errors.Is(err, ErrServerDown) {
		return fmt.Errorf("%w: %w", tool.ErrWorkerFault, err)
	}
	return err
}

// clean cuts a server's message to its first line, at most 500 bytes.
func clean(msg string) string {
	for i := 0; i < len(msg); i++ {
		if msg[i] == '\n' || msg[i] == '\r' {
			msg = msg[:i]
			break
		}
	}
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	return msg
}

// rawOrEmpty returns args as JSON, {} when empty.
func rawOrEmpty(args json.RawMessage) json.RawMessage {
	if len(args) == 0 {
		return json.RawMessage(`{}`)
	}
	return args
}

// progressTo returns the handler of a call's notifications/progress: an
// offload progress report (SPEC §5.2) of the call's context.
func progressTo(ctx context.Context) func(p, total float64, msg string) {
	return func(p, total float64, msg string) {
		var fraction *float64
		if total > 0 {
			fraction = progress.Fraction(min(p/total, 1))
		}
		if msg == "" {
			if total > 0 {
				msg = strconv.FormatFloat(p, 'f', -1, 64) + "/" + strconv.FormatFloat(total, 'f', -1, 64)
			} else {
				msg = strconv.FormatFloat(p, 'f', -1, 64)
			}
		}
		progress.Report(ctx, msg, fraction)
	}
}

// outcomeOf names a call's outcome for offload_mcp_calls_total.
func outcomeOf(err error) string {
	var retry *tool.ModelRetry
	var me *MCPError
	var te *TimeoutError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &retry):
		return "is_error"
	case errors.As(err, &me):
		return "mcp_error"
	case errors.As(err, &te):
		return "timeout"
	case errors.Is(err, tool.ErrWorkerFault):
		return "server_down"
	case errors.Is(err, context.Canceled), errors.Is(err, tool.ErrCancelled):
		return "cancelled"
	default:
		var ar *tool.ApprovalRequired
		var cd *tool.CallDeferred
		if errors.As(err, &ar) || errors.As(err, &cd) {
			return "deferred"
		}
		return "error"
	}
}
