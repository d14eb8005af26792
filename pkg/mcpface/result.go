package mcpface

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/sse"
)

// forPeople are the calls of v that wait for a person and stop its run:
// approvals and external calls, not non-blocking.
func forPeople(v *service.Conversation) []deferred.PendingTask {
	var out []deferred.PendingTask
	for _, p := range v.Pending {
		if slices.Contains(pending.ForPeople, p.Kind) && !p.NonBlocking {
			out = append(out, p)
		}
	}
	return out
}

// toAsk are the calls of conv to ask people now: those the desk lists
// with nothing stored for them yet (a call decided elsewhere, its run not
// yet continued, is not asked again), approvals and external calls that
// stop the run.
func (f *Face) toAsk(ctx context.Context, conv string) ([]deferred.PendingTask, error) {
	calls, err := f.cfg.Desk.Calls(ctx, pending.Filter{Conversation: conv, Kinds: pending.ForPeople})
	if err != nil {
		return nil, err
	}
	var out []deferred.PendingTask
	for _, c := range calls {
		if !c.NonBlocking {
			out = append(out, c.PendingTask)
		}
	}
	return out, nil
}

// await calls step with the state load reads, then again each time it
// may have changed (the conversation's next final event, or a change
// seen once the watch began, or Config.Recheck passed), until step
// says done; it returns the last state.
func (f *Face) await(ctx context.Context, conv string, load func(context.Context) (state, error), step func(state) (bool, error)) (state, error) {
	for {
		s, err := load(ctx)
		if err != nil {
			return s, err
		}
		if done, err := step(s); done || err != nil {
			return s, err
		}
		// Bounded: what changes with no event (a task cancelled while
		// it waits for people, a record written) is read at the next
		// look.
		wctx, cancel := context.WithTimeout(ctx, f.cfg.Recheck)
		err = f.cfg.Core.Watch(wctx, conv, 0, func() {
			// Begun: what changed before is read now.
			now, err := load(wctx)
			if err != nil || changed(s, now) {
				cancel()
			}
		}, func(uint64, json.RawMessage) bool { return true })
		cancel()
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return s, err
		}
	}
}

// changed reports whether b says something a does not.
func changed(a, b state) bool {
	return a.status != b.status || !a.view.UpdatedAt.Equal(b.view.UpdatedAt) || a.view.Status != b.view.Status ||
		len(a.view.Pending) != len(b.view.Pending)
}

// loader reads the state of the task of owner id (its record read again
// each time: a cancel on another replica is seen).
func (f *Face) loader(owner, id string) func(context.Context) (state, error) {
	return func(ctx context.Context) (state, error) {
		raw, err := f.cfg.Tasks.Get(ctx, owner, id)
		if err != nil {
			return state{}, err
		}
		var rec record
		if err := json.Unmarshal(raw, &rec); err != nil {
			return state{}, err
		}
		return f.stateOf(ctx, rec)
	}
}

// resultOf is the CallToolResult of a conversation in state s: its
// output when it finished, what waits when it waits for people, why it
// failed.
func resultOf(conv string, s state) *mcp.CallToolResult {
	v := s.view
	switch {
	case s.status == mcp.TaskStatusCompleted:
		r := mcp.NewToolResultText(v.Output)
		r.StructuredContent = map[string]any{"conversation_id": conv, "status": "finished", "output": v.Output}
		return r
	case s.status == mcp.TaskStatusFailed, s.status == mcp.TaskStatusCancelled:
		msg := cmp.Or(s.msg, v.Error, string(s.status))
		r := mcp.NewToolResultError(msg)
		r.StructuredContent = map[string]any{"conversation_id": conv, "status": string(s.status), "error": msg}
		return r
	}
	calls := []map[string]any{}
	var lines []string
	for _, p := range forPeople(v) {
		digest, _ := protocol.ArgsDigest(p.Args)
		calls = append(calls, map[string]any{"task_id": p.TaskID, "kind": p.Kind, "tool": p.Tool, "args": p.Args, "args_digest": digest})
		lines = append(lines, fmt.Sprintf("- %s %s(%s) (task %s)", p.Kind, p.Tool, p.Args, p.TaskID))
	}
	text := fmt.Sprintf("The conversation %s is paused: these calls wait for people (the inbox, the API, or this call as a task):\n%s",
		conv, strings.Join(lines, "\n"))
	r := mcp.NewToolResultText(text)
	r.StructuredContent = map[string]any{"conversation_id": conv, "status": "paused", "pending": calls}
	return r
}

// callAgent serves a plain tools/call of agent: its run to the end. The
// calls that wait for people are asked, each once, as elicitations when
// the client declared it can be asked (its answers settled as a task's
// are, on this replica: the call's stream is this one's); else the
// answer says what waits.
func (f *Face) callAgent(agent string) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c := callerOf(ctx)
		if !c.Start {
			return nil, forbidden("only an operator calls an agent")
		}
		raw, err := json.Marshal(req.Params.Arguments)
		if err != nil {
			return nil, invalidParams("arguments: %v", err)
		}
		a, err := f.agents[agent].args(raw)
		if err != nil {
			return nil, err
		}
		run, err := f.start(ctx, c, agent, a)
		if err != nil {
			return nil, err
		}
		conv := run.ConversationID
		rec := record{Conversation: conv}
		session, elicit := canElicit(ctx)
		asked := map[string]bool{}
		s, err := f.await(ctx, conv, func(ctx context.Context) (state, error) { return f.stateOf(ctx, rec) }, func(s state) (bool, error) {
			if s.terminal() || s.status == mcp.TaskStatusInputRequired && !elicit {
				return true, nil
			}
			calls, err := f.toAsk(ctx, conv)
			if err != nil {
				return true, err
			}
			for _, p := range calls {
				if asked[p.TaskID] {
					continue
				}
				asked[p.TaskID] = true
				if !c.settles(p.Kind) {
					return true, nil // a call the caller may not settle: said in the answer
				}
				res, err := session.RequestElicitation(ctx, mcp.ElicitationRequest{Params: f.elicitation(ctx, "", conv, agent, p)})
				if err != nil {
					if ctx.Err() != nil {
						return true, ctx.Err()
					}
					f.cfg.Logger.Warn("mcp: elicitation", "conversation_id", conv, "task_id", p.TaskID, "error", err)
					return true, nil // not asked: the answer says what waits
				}
				if res.Action == mcp.ElicitationResponseActionCancel {
					return true, nil // the question dismissed: the call waits, said in the answer
				}
				digest, _ := protocol.ArgsDigest(p.Args)
				if err := f.settle(ctx, c, conv, p.TaskID, digest, *res); err != nil {
					f.cfg.Logger.Warn("mcp: an elicitation's answer refused", "conversation_id", conv, "task_id", p.TaskID, "error", err)
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return nil, err
		}
		return resultOf(conv, s), nil
	}
}

// send writes one JSON-RPC message on s as an event "message".
func send(s *sse.Writer, msg any) error {
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return s.Event("", "message", data)
}

// taskResult serves tasks/result: an event stream that, until the task
// ends, asks each call that waits for people once as an elicitation
// related to the task and tells each change of its status, then answers
// the call's result.
func (f *Face) taskResult(ctx context.Context, w http.ResponseWriter, m message) {
	id, _, err := f.load(ctx, m.Params)
	if err != nil {
		f.reply(w, m.ID, answer{err: err})
		return
	}
	c := callerOf(ctx)
	s, err := sse.New(w, f.cfg.Heartbeat)
	if err != nil {
		f.reply(w, m.ID, answer{err: err})
		return
	}
	defer s.Close()
	if s.Open("") != nil {
		return
	}
	asked := map[string]bool{}
	var last mcp.TaskStatus
	load := f.loader(c.Owner, id)
	first, err := load(ctx)
	if err != nil {
		_ = send(s, responseOf(m.ID, answer{err: err}))
		return
	}
	conv := first.view.ConversationID
	end, err := f.await(ctx, conv, load, func(st state) (bool, error) {
		if st.status != last {
			last = st.status
			t := f.taskOf(id, record{CreatedAt: st.created}, st.status, st.msg, st.view.UpdatedAt)
			if err := send(s, map[string]any{"jsonrpc": "2.0", "method": mcp.MethodNotificationTasksStatus, "params": t}); err != nil {
				return true, err
			}
		}
		if st.terminal() {
			return true, nil
		}
		if st.status != mcp.TaskStatusInputRequired {
			return false, nil
		}
		calls, err := f.toAsk(ctx, conv)
		if err != nil {
			return true, err
		}
		for _, p := range calls {
			if asked[p.TaskID] {
				continue
			}
			asked[p.TaskID] = true
			if err := send(s, f.elicitationRequest(ctx, id, conv, st.view.Agent, p)); err != nil {
				return true, err
			}
		}
		return false, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			_ = send(s, responseOf(m.ID, answer{err: err}))
		}
		return
	}
	r := resultOf(conv, end)
	r.Meta = &mcp.Meta{AdditionalFields: map[string]any{mcp.RelatedTaskMetaKey: mcp.RelatedTaskMeta(id), MetaConversation: conv}}
	_ = send(s, responseOf(m.ID, answer{result: r}))
}

// elicitationPre prefixes the IDs of the face's elicitation requests:
// offload-mcp/<task>/<call>/<args digest>. An answer posted to any
// replica names what it answers.
const elicitationPre = "offload-mcp/"

// isElicitationID reports whether a response's id is one of the face's
// elicitations'.
func isElicitationID(id json.RawMessage) bool {
	var s string
	return json.Unmarshal(id, &s) == nil && strings.HasPrefix(s, elicitationPre)
}

// elicitation is the elicitation/create params of call p of
// conversation conv (of task id: related to it; "" for a plain call's).
func (f *Face) elicitation(ctx context.Context, id, conv, agent string, p deferred.PendingTask) mcp.ElicitationParams {
	digest, _ := protocol.ArgsDigest(p.Args)
	meta := map[string]any{MetaConversation: conv, "offload/task_id": p.TaskID, "offload/args_digest": digest}
	if id != "" {
		meta[mcp.RelatedTaskMetaKey] = mcp.RelatedTaskMeta(id)
	}
	params := mcp.ElicitationParams{Mode: mcp.ElicitationModeForm, Meta: &mcp.Meta{AdditionalFields: meta}}
	if p.Kind == deferred.KindExternal {
		params.Message = fmt.Sprintf("%s(%s) waits for its answer.", p.Tool, p.Args)
		params.RequestedSchema = map[string]any{"type": "object", "properties": map[string]any{
			"content": map[string]any{"type": "string", "title": "Answer", "description": "the call's result: JSON, or text"}},
			"required": []string{"content"}}
		return params
	}
	msg := fmt.Sprintf("Approve %s(%s)?", p.Tool, p.Args)
	if f.cfg.Tools != nil {
		if tl, err := f.cfg.Tools(ctx, agent, p.Tool); err == nil && tl != nil && tl.Description != "" {
			msg += " " + tl.Description
		}
	}
	if c, err := f.cfg.Desk.Call(ctx, conv, p.TaskID); err == nil && !c.Expires.IsZero() {
		msg += fmt.Sprintf(" (expires %s: then %s)", c.Expires.UTC().Format(time.RFC3339), c.OnTimeout)
	}
	params.Message = msg
	params.RequestedSchema = map[string]any{"type": "object", "properties": map[string]any{
		"approved": map[string]any{"type": "boolean", "title": "Approve", "description": "run the call as shown"},
		"message":  map[string]any{"type": "string", "title": "Message", "description": "what the agent is told"}},
		"required": []string{"approved"}}
	return params
}

// elicitationRequest is the JSON-RPC request of task id's elicitation of
// call p, its ID naming what its answer answers.
func (f *Face) elicitationRequest(ctx context.Context, id, conv, agent string, p deferred.PendingTask) map[string]any {
	digest, _ := protocol.ArgsDigest(p.Args)
	return map[string]any{"jsonrpc": "2.0", "id": elicitationPre + id + "/" + p.TaskID + "/" + digest,
		"method": mcp.MethodElicitationCreate, "params": f.elicitation(ctx, id, conv, agent, p)}
}

// refusal is an elicitation's answer the desk did not take: the HTTP
// status of its POST and why.
type refusal struct {
	status int
	msg    string
}

func (r *refusal) Error() string { return r.msg }

// settle publishes c's answer to the elicitation of call task of conv
// (its arguments' digest): a decision or an answer through the desk,
// channel mcp. A call decided or answered already, an elicitation
// cancelled, are nothing to publish (nil); a refusal is a *refusal.
func (f *Face) settle(ctx context.Context, c Caller, conv, task, digest string, res mcp.ElicitationResult) error {
	call, err := f.cfg.Desk.Call(ctx, conv, task)
	if errors.Is(err, pending.ErrNotPending) {
		return nil // decided or answered already: not asked again
	}
	if err != nil {
		return err
	}
	if res.Action != mcp.ElicitationResponseActionAccept && res.Action != mcp.ElicitationResponseActionDecline {
		return nil // cancelled: the call waits
	}
	content, _ := res.Content.(map[string]any)
	switch call.Kind {
	case deferred.KindApproval:
		if !c.Decide {
			return &refusal{http.StatusForbidden, "forbidden: only an approver decides an approval"}
		}
		if !call.Expires.IsZero() && !f.cfg.Now().Before(call.Expires) {
			return &refusal{http.StatusConflict, "the approval expired: its timeout decides it"}
		}
		approved, _ := content["approved"].(bool)
		msg, _ := content["message"].(string)
		if res.Action == mcp.ElicitationResponseActionDecline && msg == "" {
			msg = "declined"
		}
		d := protocol.Decision{Approved: res.Action == mcp.ElicitationResponseActionAccept && approved, Message: msg, By: c.Name,
			ArgsDigest: digest, Channel: protocol.ChannelMCP}
		_, err = f.cfg.Desk.Decide(ctx, conv, task, d)
	case deferred.KindExternal:
		if !c.Answer {
			return &refusal{http.StatusForbidden, "forbidden: only an answerer answers an external call"}
		}
		var data []byte
		if res.Action == mcp.ElicitationResponseActionDecline {
			data, _ = json.Marshal(protocol.Result{Status: protocol.StatusError, Message: "declined by " + c.Name, ErrorType: "declined"})
		} else {
			text, _ := content["content"].(string)
			raw := json.RawMessage(text)
			if !json.Valid(raw) {
				raw, _ = json.Marshal(text)
			}
			data, _ = json.Marshal(map[string]json.RawMessage{"content": raw})
		}
		_, err = f.cfg.Desk.AnswerAs(ctx, conv, task, data, c.Name, protocol.ChannelMCP)
	default:
		return &refusal{http.StatusBadRequest, "a background task is not answered"}
	}
	var re *conversation.RefusedError
	switch {
	case errors.As(err, &re) && re.Reason == conversation.ReasonDuplicate:
		return nil
	case errors.As(err, &re):
		return &refusal{http.StatusConflict, re.Error()}
	}
	return err
}

// elicitationAnswer serves the client's answer to one of a task's
// elicitations, on any replica: settled by the caller, the task the
// caller's (another token's: 404). Its POST's status says whether the
// desk took it (202) or why not.
func (f *Face) elicitationAnswer(ctx context.Context, w http.ResponseWriter, m message) {
	var raw string
	_ = json.Unmarshal(m.ID, &raw)
	parts := strings.SplitN(strings.TrimPrefix(raw, elicitationPre), "/", 3)
	if len(parts) != 3 {
		http.Error(w, "not an elicitation of this server", http.StatusBadRequest)
		return
	}
	id, task, digest := parts[0], parts[1], parts[2]
	c := callerOf(ctx)
	recRaw, err := f.cfg.Tasks.Get(ctx, c.Owner, id)
	if errors.Is(err, conversation.ErrNotFound) {
		http.Error(w, "task not found", http.StatusNotFound)
		return
	}
	var rec record
	if err == nil {
		err = json.Unmarshal(recRaw, &rec)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if len(m.Error) > 0 && string(m.Error) != "null" {
		w.WriteHeader(http.StatusAccepted) // the client could not ask: the call waits
		return
	}
	var res mcp.ElicitationResult
	if err := json.Unmarshal(m.Result, &res); err != nil {
		http.Error(w, "the elicitation's result is not {action, content}", http.StatusBadRequest)
		return
	}
	var rf *refusal
	switch err := f.settle(ctx, c, rec.Conversation, task, digest, res); {
	case errors.As(err, &rf):
		http.Error(w, rf.msg, rf.status)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusAccepted)
	}
}
