package deferred

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultDenial is the message of a denial without one.
const DefaultDenial = "The tool call was denied."

// UnknownEffectText is what the model sees of a denied call whose effect is
// unknown (SPEC §13): its worker stopped while running it, and a person
// chose not to run it again.
func UnknownEffectText(toolName string) string {
	return "The outcome of tool '" + toolName + "' is unknown: its worker stopped while running it, and it was not run again."
}

// Kind is the category of a deferred call.
type Kind string

const (
	// KindApproval is a call waiting for a person's approval.
	KindApproval Kind = "approval"
	// KindExternal is a call executed elsewhere, waiting for its result.
	KindExternal Kind = "external"
)

// Requests are the deferred calls a run ended with.
type Requests struct {
	// Calls need external execution.
	Calls []message.ToolCall `json:"calls"`
	// Approvals need a person's approval.
	Approvals []message.ToolCall `json:"approvals"`
	// Metadata is keyed by tool call ID; present only for calls whose
	// deferral carried metadata.
	Metadata map[string]map[string]any `json:"metadata"`
	// TaskIDs maps each tool call ID to its ULID task ID, minted at deferral
	// and stable across resumes.
	TaskIDs map[string]string `json:"task_ids"`
}

// Len returns the number of deferred calls.
func (r *Requests) Len() int {
	if r == nil {
		return 0
	}
	return len(r.Calls) + len(r.Approvals)
}

// Kind returns the category of the call with the given ID, or "" if it is
// not pending.
func (r *Requests) Kind(toolCallID string) Kind {
	if r == nil {
		return ""
	}
	for _, c := range r.Approvals {
		if c.ToolCallID == toolCallID {
			return KindApproval
		}
	}
	for _, c := range r.Calls {
		if c.ToolCallID == toolCallID {
			return KindExternal
		}
	}
	return ""
}

// Clone returns a deep copy of r.
func (r *Requests) Clone() *Requests {
	if r == nil {
		return nil
	}
	out := &Requests{
		Calls:     slices.Clone(r.Calls),
		Approvals: slices.Clone(r.Approvals),
		Metadata:  copyMetadata(r.Metadata),
		TaskIDs:   maps.Clone(r.TaskIDs),
	}
	return out
}

// ToolApproved approves a call, optionally replacing (not merging) its
// arguments; override arguments are validated like the model's.
type ToolApproved struct {
	// OverrideArgs, when non-nil, replaces the call's arguments.
	OverrideArgs json.RawMessage
}

// ToolDenied denies a call; the model sees Message (DefaultDenial if empty).
type ToolDenied struct {
	// Message is shown to the model.
	Message string
	// Reason is empty for a denial, ReasonExpired for an approval no one
	// decided in time (SPEC §12), which is never shown as a person's
	// denial.
	Reason string
}

// ReasonExpired is the [ToolDenied] reason of an expired approval.
const ReasonExpired = "expired"

// Text returns the message, or DefaultDenial when it is empty.
func (d ToolDenied) Text() string {
	if d.Message == "" {
		return DefaultDenial
	}
	return d.Message
}

// ErrInvalidApproval is returned for an approval value that is not true,
// false, ToolApproved or ToolDenied (or their pointers).
var ErrInvalidApproval = errors.New("deferred: invalid approval value")

// NormalizeApproval maps an approval value to ToolApproved or ToolDenied:
// true → ToolApproved{}, false → ToolDenied{} (default message). An
// *ApprovalTimeoutError is returned as the error: the run ends with it.
// Any other type, including nil, is an error wrapping ErrInvalidApproval.
func NormalizeApproval(v any) (any, error) {
	switch a := v.(type) {
	case *ApprovalTimeoutError:
		if a != nil {
			return nil, a
		}
	case bool:
		if a {
			return ToolApproved{}, nil
		}
		return ToolDenied{}, nil
	case ToolApproved:
		return a, nil
	case *ToolApproved:
		if a != nil {
			return *a, nil
		}
	case ToolDenied:
		return a, nil
	case *ToolDenied:
		if a != nil {
			return *a, nil
		}
	}
	return nil, fmt.Errorf("%w: %T (%v); use true, false, deferred.ToolApproved or deferred.ToolDenied", ErrInvalidApproval, v, v)
}

// Results are the answers to deferred calls, given to the follow-up run.
type Results struct {
	// Calls holds results of external calls by tool call ID: any JSON-able
	// value (the return value), a tool.Return, a *tool.ModelRetry, a
	// *tool.ToolFailed or a message.RetryPrompt.
	Calls map[string]any
	// Approvals holds decisions by tool call ID: true, false, ToolApproved or
	// ToolDenied. Anything else is refused.
	Approvals map[string]any
	// Metadata is given to approved calls as RunContext.ToolCallMetadata.
	Metadata map[string]map[string]any
}

// Empty reports whether r resolves nothing (metadata alone does not count).
func (r *Results) Empty() bool { return r == nil || (len(r.Calls) == 0 && len(r.Approvals) == 0) }

// Update merges other into r; other's entries win.
func (r *Results) Update(other *Results) {
	if other == nil {
		return
	}
	if r.Calls == nil {
		r.Calls = map[string]any{}
	}
	if r.Approvals == nil {
		r.Approvals = map[string]any{}
	}
	if r.Metadata == nil {
		r.Metadata = map[string]map[string]any{}
	}
	for k, v := range other.Calls {
		r.Calls[k] = v
	}
	for k, v := range other.Approvals {
		r.Approvals[k] = v
	}
	for k, v := range other.Metadata {
		r.Metadata[k] = tool.DeepCopy(v)
	}
}

// BuildResults checks that every ID is pending in the category it is given
// for and returns the results. With approveAll, every pending approval not
// explicitly answered is approved. Metadata is deep-copied.
func (r *Requests) BuildResults(approvals, calls map[string]any, metadata map[string]map[string]any, approveAll bool) (*Results, error) {
	if bad := unknownIDs(approvals, r.Approvals); len(bad) > 0 {
		return nil, fmt.Errorf("`approvals` contains tool call IDs not in this `DeferredToolRequests.approvals`: %s", idList(bad))
	}
	if bad := unknownIDs(calls, r.Calls); len(bad) > 0 {
		return nil, fmt.Errorf("`calls` contains tool call IDs not in this `DeferredToolRequests.calls`: %s", idList(bad))
	}
	for id, v := range approvals {
		if _, err := NormalizeApproval(v); err != nil {
			return nil, fmt.Errorf("approval for %q: %w", id, err)
		}
	}
	out := &Results{
		Approvals: map[string]any{},
		Calls:     map[string]any{},
		Metadata:  copyMetadata(metadata),
	}
	for k, v := range approvals {
		out.Approvals[k] = v
	}
	for k, v := range calls {
		out.Calls[k] = v
	}
	if approveAll {
		for _, c := range r.Approvals {
			if _, ok := out.Approvals[c.ToolCallID]; !ok {
				out.Approvals[c.ToolCallID] = ToolApproved{}
			}
		}
	}
	if out.Metadata == nil {
		out.Metadata = map[string]map[string]any{}
	}
	return out, nil
}

// Remaining returns the requests not resolved by results, filtering each
// category by its own results only (an approval answered under Calls stays
// pending), or nil when nothing remains. Nil results answer nothing.
func (r *Requests) Remaining(results *Results) *Requests {
	if r == nil {
		return nil
	}
	if results == nil {
		results = &Results{}
	}
	out := &Requests{Metadata: map[string]map[string]any{}, TaskIDs: map[string]string{}}
	keep := func(c message.ToolCall) {
		if md, ok := r.Metadata[c.ToolCallID]; ok {
			out.Metadata[c.ToolCallID] = tool.DeepCopy(md)
		}
		if id, ok := r.TaskIDs[c.ToolCallID]; ok {
			out.TaskIDs[c.ToolCallID] = id
		}
	}
	for _, c := range r.Approvals {
		if _, ok := results.Approvals[c.ToolCallID]; !ok {
			out.Approvals = append(out.Approvals, c)
			keep(c)
		}
	}
	for _, c := range r.Calls {
		if _, ok := results.Calls[c.ToolCallID]; !ok {
			out.Calls = append(out.Calls, c)
			keep(c)
		}
	}
	if out.Len() == 0 {
		return nil
	}
	return out
}

func unknownIDs(m map[string]any, calls []message.ToolCall) []string {
	var bad []string
	for id := range m {
		if !slices.ContainsFunc(calls, func(c message.ToolCall) bool { return c.ToolCallID == id }) {
			bad = append(bad, id)
		}
	}
	sort.Strings(bad)
	return bad
}

func idList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = "'" + id + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func copyMetadata(m map[string]map[string]any) map[string]map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]map[string]any, len(m))
	for k, v := range m {
		out[k] = tool.DeepCopy(v)
	}
	return out
}
