package web

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
)

// The operator's hands on the fleet's tools (SPEC §19): each action is
// taken, and audited, in the name of the token's holder.

// toolOf returns the {tool} of r's path, a valid tool name.
func toolOf(r *http.Request) (string, error) {
	name := r.PathValue("tool")
	if err := tool.ValidateName(name); err != nil {
		return "", badRequest("%v", err)
	}
	return name, nil
}

// decodeOptional decodes r's body into v; an empty body leaves v as it is.
func decodeOptional(r *http.Request, v any, what string) error {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return badRequest("the body is not %s", what)
	}
	return nil
}

// tools lists every tool with its workers, in flight, queued, limits,
// cool-down, pause and dead letters.
func (h *handler) tools(w http.ResponseWriter, r *http.Request) error {
	list, err := h.Tools.List(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": list})
	return nil
}

// pauseRequest is the optional body of a pause: until when, or for how
// long (a Go duration); neither: until resumed.
type pauseRequest struct {
	Until time.Time `json:"until,omitzero"`
	For   string    `json:"for,omitempty"`
}

func (h *handler) pauseTool(w http.ResponseWriter, r *http.Request) error {
	name, err := toolOf(r)
	if err != nil {
		return err
	}
	var req pauseRequest
	if err := decodeOptional(r, &req, `a pause {"until"?: RFC 3339 time, "for"?: "10m"}`); err != nil {
		return err
	}
	until := req.Until
	if req.For != "" {
		d, err := time.ParseDuration(req.For)
		if err != nil || d <= 0 || !until.IsZero() {
			return badRequest(`for is a positive duration such as "10m", without until`)
		}
		until = h.Now().Add(d)
	}
	if !until.IsZero() && !until.After(h.Now()) {
		return badRequest("until is past")
	}
	by := callerOf(r).Name
	if err := h.Tools.Pause(r.Context(), name, until, by); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": name, "paused": true, "until": until, "by": by})
	return nil
}

func (h *handler) resumeTool(w http.ResponseWriter, r *http.Request) error {
	name, err := toolOf(r)
	if err != nil {
		return err
	}
	by := callerOf(r).Name
	if err := h.Tools.Resume(r.Context(), name, by); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": name, "paused": false, "by": by})
	return nil
}

// cancelRequest is the optional body of a cancel: its filter.
type cancelRequest struct {
	Agent     string `json:"agent,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	OlderThan string `json:"older_than,omitempty"`
}

// cancelCalls cancels the calls held in the tool's queue that the body
// selects (every one without).
func (h *handler) cancelCalls(w http.ResponseWriter, r *http.Request) error {
	name, err := toolOf(r)
	if err != nil {
		return err
	}
	var req cancelRequest
	if err := decodeOptional(r, &req, `a filter {"agent"?, "tenant"?, "older_than"?: "5m"}`); err != nil {
		return err
	}
	f := service.ToolFilter{Tool: name, Agent: req.Agent, Tenant: req.Tenant}
	if req.OlderThan != "" {
		if f.OlderThan, err = time.ParseDuration(req.OlderThan); err != nil || f.OlderThan <= 0 {
			return badRequest(`older_than is a positive duration such as "5m"`)
		}
	}
	got, err := h.Tools.Cancel(r.Context(), f, callerOf(r).Name)
	if err != nil {
		return err
	}
	if got == nil {
		got = []service.CancelledCall{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": name, "cancelled": got})
	return nil
}

func (h *handler) deadLetters(w http.ResponseWriter, r *http.Request) error {
	name, err := toolOf(r)
	if err != nil {
		return err
	}
	letters, err := h.Tools.DeadLetters(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": name, "dead_letters": letters})
	return nil
}

// letterOf returns the {tool} and {seq} of r's path.
func letterOf(r *http.Request) (string, uint64, error) {
	name, err := toolOf(r)
	if err != nil {
		return "", 0, err
	}
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return "", 0, badRequest("seq is a dead letter's sequence, a positive integer")
	}
	return name, seq, nil
}

func (h *handler) replay(w http.ResponseWriter, r *http.Request) error {
	name, seq, err := letterOf(r)
	if err != nil {
		return err
	}
	task, err := h.Tools.Replay(r.Context(), name, seq, callerOf(r).Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": name, "seq": seq, "task_id": task.TaskID, "attempt": task.Attempt})
	return nil
}

func (h *handler) discard(w http.ResponseWriter, r *http.Request) error {
	name, seq, err := letterOf(r)
	if err != nil {
		return err
	}
	if err := h.Tools.Discard(r.Context(), name, seq, callerOf(r).Name); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": name, "seq": seq, "discarded": true})
	return nil
}
