package web

import (
	"cmp"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// entry is one line of a conversation's timeline: a prompt, the model's
// text, a call, its result, or a decision with who and when.
type entry struct {
	// Kind is prompt, model, call, result, retry, decision or answer.
	Kind string
	At   time.Time
	// Tool and Task name the call a call, result or decision is of.
	Tool, Task string
	// Text is the prompt, the model's text, a call's arguments, a result's
	// content, or a decision's message.
	Text string
	// Outcome is a result's (success, failed, denied, …) or a decision's
	// (approved, denied).
	Outcome string
	// By is who decided or answered, Channel how (inbox, api, link,
	// cli, nats);
	// Edited the arguments a decision replaced.
	By, Channel, Edited string
	// Unverified marks a decision the service did not sign: its by is
	// only what its publisher claimed, its channel nats (Claimed the one
	// it claimed, if another); or an answer it did not sign, which names
	// no one.
	Unverified bool
	Claimed    string
	// WaitTask, on a call, is the task of its pending call a person
	// decides on the page (its card's anchor).
	WaitTask string
}

// timeline shows conversation id's page (SPEC §21): its status, agent,
// who started it and why it failed; its timeline (the saved history,
// then the calls of its live run the history does not hold yet, with
// their progress and results); the calls it waits for, decidable there;
// and a cancel button while a run of it is live.
func (h *handler) timeline(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := protocol.ParseID(id); err != nil {
		return badRequest("Not a conversation ID: %s", err.Error())
	}
	st, err := h.Core.State(r.Context(), id)
	if err != nil {
		if errors.Is(err, conversation.ErrNotFound) {
			return errorf(http.StatusNotFound, "not_found", "Conversation %s is unknown.", id)
		}
		return err
	}
	view, err := h.Core.Get(r.Context(), id)
	if err != nil {
		return err
	}
	calls, err := h.Desk.Calls(r.Context(), pending.Filter{Conversation: id, Kinds: pending.ForPeople})
	if err != nil {
		return err
	}
	waiting := make([]item, 0, len(calls))
	for _, c := range calls {
		waiting = append(waiting, h.itemOf(c))
	}
	positions(waiting)
	es := entries(st.History)
	byCall := map[string]string{}
	for _, it := range waiting {
		byCall[it.ToolCallID] = it.Task
	}
	for i := range es {
		if es[i].Kind == "call" {
			es[i].WaitTask = byCall[es[i].Task]
		}
	}
	var live []liveCall
	if view.Status == conversation.StatusRunning {
		if live, err = h.liveCalls(r, id, st.History, st.UpdatedAt, byCall); err != nil {
			h.Logger.Warn("conversation page: the live run's events", slog.String("conversation_id", id), slog.Any("error", err))
		}
		// A call shown live (with its progress) is not shown again as the
		// stored step's call.
		running := map[string]bool{}
		for _, c := range live {
			running[c.ToolCallID] = true
		}
		es = slices.DeleteFunc(es, func(e entry) bool { return e.Kind == "call" && running[e.Task] })
	}
	c := callerOf(r)
	data := map[string]any{"ID": id, "View": view, "Entries": es, "Live": live, "Waiting": waiting,
		"Notice": noticeOf(r.URL.Query()), "Role": c.Identity.String(), "MayDecide": c.may(RoleApprover), "MayAnswer": c.may(RoleAnswerer),
		"MayCancel": c.may(RoleOperator) && view.Status == conversation.StatusRunning, "Links": h.Links != nil,
		"Back": "/conversations/" + id}
	if r.URL.Query().Get("done") == "cancelling" {
		data["Notice"] = "Cancelling: the run stops where it is, its state saved."
	}
	if pid, err := protocol.ParseID(id); err == nil {
		data["Started"] = pid.Timestamp().UTC()
	}
	h.render(w, r, http.StatusOK, "timeline", data)
	return nil
}

// entries returns history h as timeline entries, in order; a call's
// decision (the history metadata session.DecisionMetaKey of its tool
// return) comes before its result.
func entries(h message.History) []entry {
	var out []entry
	for _, m := range h {
		for _, p := range m.Parts {
			switch x := p.(type) {
			case message.UserPrompt:
				var b strings.Builder
				for _, c := range x.Content {
					if c.Type == "text" {
						b.WriteString(c.Text)
					}
				}
				out = append(out, entry{Kind: "prompt", At: m.Timestamp, Text: b.String()})
			case message.Text:
				if m.Role == message.RoleResponse && strings.TrimSpace(x.Content) != "" {
					out = append(out, entry{Kind: "model", At: m.Timestamp, Text: x.Content})
				}
			case message.ToolCall:
				out = append(out, entry{Kind: "call", At: m.Timestamp, Tool: x.ToolName, Task: x.ToolCallID, Text: pretty([]byte(x.Args))})
			case message.ToolReturn:
				if d, ok := x.Metadata[session.DecisionMetaKey].(map[string]any); ok {
					out = append(out, decisionEntry(x.ToolName, d, m.Timestamp))
				}
				if a, ok := x.Metadata[session.AnswerMetaKey].(map[string]any); ok {
					out = append(out, answerEntry(x.ToolName, a, m.Timestamp))
				}
				out = append(out, entry{Kind: "result", At: m.Timestamp, Tool: x.ToolName, Task: x.ToolCallID,
					Text: message.ContentText(x.Content), Outcome: string(x.Outcome)})
			case message.RetryPrompt:
				out = append(out, entry{Kind: "retry", At: m.Timestamp, Tool: x.ToolName, Task: x.ToolCallID, Text: x.Content})
			}
		}
	}
	return out
}

// answerEntry is the entry of answer note a (session's offload.answer
// metadata) of an external call of tool: who answered and how when the
// service signed the answer; otherwise unverified, naming no one.
func answerEntry(tool string, a map[string]any, fallback time.Time) entry {
	e := entry{Kind: "answer", Tool: tool, At: fallback}
	e.Task, _ = a["task_id"].(string)
	if verified, ok := a["verified"].(bool); ok && verified {
		e.By, _ = a["by"].(string)
		e.Channel, _ = a["channel"].(string)
		e.By = cmp.Or(e.By, "(not named)")
	} else {
		e.Unverified, e.Channel = true, protocol.ChannelNATS
	}
	if at, ok := a["at"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			e.At = t
		}
	}
	return e
}

// decisionEntry is the entry of decision note d (session's
// offload.decision metadata) of a call of tool.
func decisionEntry(tool string, d map[string]any, fallback time.Time) entry {
	e := entry{Kind: "decision", Tool: tool, At: fallback, Outcome: "denied"}
	if ok, _ := d["approved"].(bool); ok {
		e.Outcome = "approved"
	}
	e.Task, _ = d["task_id"].(string)
	e.By, _ = d["by"].(string)
	e.Channel, _ = d["channel"].(string)
	if verified, ok := d["verified"].(bool); !ok || !verified {
		e.Unverified = true
		e.Claimed, _ = d["claimed_channel"].(string)
	}
	e.Text, _ = d["message"].(string)
	if at, ok := d["at"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			e.At = t
		}
	}
	if args, ok := d["override_args"]; ok && args != nil {
		if b, err := json.Marshal(args); err == nil {
			e.Edited = string(b)
		}
	}
	if e.By == "" {
		e.By = "(not named)"
	}
	return e
}
