package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// defaultPollInterval is the tasks/get interval when the server gives none.
const defaultPollInterval = time.Second

// taskInfo is an MCP task (2025-11-25) as tools/call and tasks/get give it.
type taskInfo struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	PollInterval  *int64 `json:"pollInterval,omitempty"`
}

// terminal reports whether the task's status is final.
func (t taskInfo) terminal() bool {
	return t.Status == "completed" || t.Status == "failed" || t.Status == "cancelled"
}

// interval is the task's pollInterval, defaultPollInterval without one,
// bounded to [50ms, 1m].
func (t taskInfo) interval() time.Duration {
	if t.PollInterval == nil || *t.PollInterval <= 0 {
		return defaultPollInterval
	}
	return min(max(time.Duration(*t.PollInterval)*time.Millisecond, 50*time.Millisecond), time.Minute)
}

// TaskState is what an MCP tool records in its attempt's effect-ledger
// entry (tool.RunContext.Checkpoint) once its MCP task exists: a delivery
// of the attempt after the worker stopped resumes polling it.
type TaskState struct {
	// Server is the configured name of the server.
	Server string `json:"server"`
	// TaskID is the MCP task's ID.
	TaskID string `json:"mcp_task_id"`
	// Session is the MCP session of a streamable HTTP server the task was
	// created in (a server may know its tasks only in their session).
	Session string `json:"session,omitempty"`
}

// followTask follows an MCP task to its end: recorded in the attempt's
// ledger entry (unless resumed), polled with tasks/get at its
// pollInterval (its statusMessage reported as progress) while the worker
// keeps the offload task alive, then its result read with tasks/result
// (at once when it needs input: the server's elicitation comes with it).
// An offload cancel sends tasks/cancel.
func (s *Server) followTask(ctx context.Context, rc *tool.RunContext, c *conn, t taskInfo, resumed bool) (any, error) {
	log := s.log.With(slog.String("mcp_task_id", t.TaskID))
	setTask(ctx, t.TaskID)
	if !resumed && rc.Checkpoint != nil {
		st := TaskState{Server: s.cfg.Name, TaskID: t.TaskID}
		if len(s.cfg.Command) == 0 {
			st.Session = c.tr.GetSessionId()
		}
		data, _ := json.Marshal(st)
		if err := rc.Checkpoint(ctx, data); err != nil {
			log.Warn("MCP task not recorded in the effect ledger: a worker restart cannot resume it", slog.Any("error", err))
		} else {
			log.Info("MCP task created, recorded in the effect ledger")
		}
	}
	cancelled := func() (any, error) {
		s.cancelTask(c, t.TaskID, log)
		return nil, context.Cause(ctx)
	}
	lastMsg := ""
	first := !resumed
	for !t.terminal() && t.Status != "input_required" {
		if t.StatusMessage != "" && t.StatusMessage != lastMsg {
			lastMsg = t.StatusMessage
			progress.Report(ctx, t.StatusMessage, nil)
		}
		if first { // a resumed task is looked at at once
			timer := time.NewTimer(t.interval())
			select {
			case <-ctx.Done():
				timer.Stop()
				return cancelled()
			case <-timer.C:
			}
		}
		first = true
		raw, err := s.request(ctx, c, string(mcp.MethodTasksGet), map[string]any{"taskId": t.TaskID}, true)
		if err != nil {
			if ctx.Err() != nil {
				return cancelled()
			}
			var rpc *RPCError
			if errors.As(err, &rpc) {
				// The server does not know the task (any more): what it did
				// is unknown.
				return nil, unknownTask(s.cfg.Name, t.TaskID, rpc.Message)
			}
			return nil, fault(ctx, err)
		}
		var next taskInfo
		if err := json.Unmarshal(raw, &next); err != nil || next.Status == "" {
			return nil, &MCPError{Code: -32700, Message: "tasks/get: the server's answer does not decode"}
		}
		next.TaskID = t.TaskID
		if next.PollInterval == nil {
			next.PollInterval = t.PollInterval
		}
		t = next
	}
	raw, err := s.request(ctx, c, string(mcp.MethodTasksResult), map[string]any{"taskId": t.TaskID}, true)
	if err != nil {
		if ctx.Err() != nil {
			return cancelled()
		}
		var rpc *RPCError
		if errors.As(err, &rpc) && t.Status != "failed" && resumed {
			return nil, unknownTask(s.cfg.Name, t.TaskID, rpc.Message)
		}
		return nil, s.callError(ctx, err)
	}
	if t.Status == "cancelled" {
		return nil, &tool.ToolFailed{Message: "the MCP server cancelled the task"}
	}
	return mapResult(raw)
}

// cancelTask sends tasks/cancel, with a context of its own (the call's
// has ended).
func (s *Server) cancelTask(c *conn, taskID string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	raw, err := s.request(ctx, c, string(mcp.MethodTasksCancel), map[string]any{"taskId": taskID}, true)
	if err != nil {
		log.Warn("tasks/cancel failed", slog.Any("error", err))
		return
	}
	// The server answers with the task as it is now: "cancelled" is its
	// word that the task stopped there.
	var t taskInfo
	_ = json.Unmarshal(raw, &t)
	log.Info("MCP task cancelled (tasks/cancel)", slog.String("status", t.Status))
}

// unknownTask is the outcome of a resumed MCP task its server does not
// know: the effect of the call is unknown, and a person decides (SPEC §13,
// the shape of a worker's unknown effect).
func unknownTask(server, taskID, why string) error {
	return &tool.ApprovalRequired{Metadata: map[string]any{
		tool.EffectMetaKey: tool.EffectUnknown,
		MetaServer:         server,
		"mcp.task_id":      taskID,
		"reason":           "the MCP server does not know the task any more: " + clean(why),
	}}
}

// resume resumes the MCP task recorded in the attempt's ledger entry by
// the worker that started it: polled again, never called again. A task of
// another HTTP session is polled in that session.
func (s *Server) resume(ctx context.Context, rc *tool.RunContext) (any, error) {
	var st TaskState
	if err := json.Unmarshal(rc.Resume, &st); err != nil || st.TaskID == "" || st.Server != s.cfg.Name {
		return nil, &tool.ApprovalRequired{Metadata: map[string]any{tool.EffectMetaKey: tool.EffectUnknown, MetaServer: s.cfg.Name,
			"reason": fmt.Sprintf("the effect ledger records no MCP task of this server (%s)", clean(string(rc.Resume)))}}
	}
	s.log.Info("resuming the MCP task recorded in the effect ledger", slog.String("mcp_task_id", st.TaskID))
	c, err := s.current(ctx)
	if err != nil {
		return nil, fault(ctx, err)
	}
	if st.Session != "" && len(s.cfg.Command) == 0 && st.Session != c.tr.GetSessionId() {
		side, err := s.sessionConn(ctx, st.Session)
		if err != nil {
			return nil, fault(ctx, fmt.Errorf("%w: %q: session %s: %w", ErrServerDown, s.cfg.Name, st.Session, err))
		}
		defer s.close(side)
		c = side
	}
	return s.followTask(ctx, rc, c, taskInfo{TaskID: st.TaskID, Status: "working"}, true)
}

// sessionConn opens a connection to the HTTP server in an existing
// session (one a worker that stopped had), to follow a task created in it.
func (s *Server) sessionConn(ctx context.Context, session string) (*conn, error) {
	opts := []transport.StreamableHTTPCOption{transport.WithSession(session)}
	if h := s.cfg.headers(s.opts.Getenv); len(h) > 0 {
		opts = append(opts, transport.WithHTTPHeaders(h))
	}
	tr, err := transport.NewStreamableHTTP(s.cfg.URL, opts...)
	if err != nil {
		return nil, err
	}
	tr.SetProtocolVersion(ProtocolVersion)
	c := &conn{done: make(chan struct{}), tr: tr, since: time.Now()}
	c.client = client.NewClient(tr, client.WithSession(), client.WithProtocolVersion(ProtocolVersion))
	// The transport answers the server's requests on the context it
	// starts with: the server's, not the connecting call's.
	if err := c.client.Start(s.ctx); err != nil {
		return nil, err
	}
	tr.SetRequestHandler(func(ctx context.Context, r transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
		return s.serverRequest(ctx, c, r)
	})
	c.client.OnNotification(func(n mcp.JSONRPCNotification) { s.notification(c, n) })
	return c, nil
}

// TaskStatus returns the status of an MCP task of the server (tasks/get in
// the server's current session): for operators and tests.
func (s *Server) TaskStatus(ctx context.Context, taskID string) (string, error) {
	c, err := s.current(ctx)
	if err != nil {
		return "", err
	}
	raw, err := s.request(ctx, c, string(mcp.MethodTasksGet), map[string]any{"taskId": taskID}, true)
	if err != nil {
		return "", err
	}
	var t taskInfo
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", fmt.Errorf("tasks/get: %w", err)
	}
	return t.Status, nil
}
