package conversation

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// State is what the store keeps of a conversation between runs. Its JSON
// form is stable.
type State struct {
	// ID is the conversation's ULID.
	ID string `json:"conversation_id"`
	// History is the whole message history.
	History message.History `json:"history"`
	// Pending is what the last run left pending: deferred calls and the
	// background tasks that outlived it. Nil when nothing is pending.
	Pending *deferred.PendingRecord `json:"pending,omitempty"`
	// Arrivals are the decisions, answers and background outcomes that
	// arrived for pending tasks and have not been applied by a run yet, in
	// arrival order.
	Arrivals []Arrival `json:"arrivals,omitempty"`
	// Settled lists the task IDs whose arrivals earlier runs applied, so
	// that a second message for one of them is refused as a duplicate.
	Settled []string `json:"settled,omitempty"`
	// SettledLive lists the settled tasks whose result, if any, a run
	// consumed live rather than from Arrivals: the first final result of
	// each read from the results stream afterwards is that one, neither
	// an arrival nor a duplicate (see [State.TakeSettledLive]).
	SettledLive []string `json:"settled_live,omitempty"`
	// Votes are the approvals counted so far for pending calls that need
	// a quorum (deferred.PendingTask.Required > 1), in arrival order:
	// the call's arrival is appended at the Required-th distinct identity.
	Votes []Vote `json:"votes,omitempty"`
	// Checkpoint says how far the streams of decisions, answers and
	// results have been read for this conversation.
	Checkpoint Checkpoint `json:"checkpoint"`
	// UpdatedAt is when the state was last saved.
	UpdatedAt time.Time `json:"updated_at"`
	// Trace is the W3C traceparent of the run that last saved a step, when
	// it was traced: the run continuing the conversation links its span
	// to it (SPEC §14).
	Trace string `json:"trace,omitempty"`
	// Agent names the agent the conversation runs with, set by `agent
	// serve` (SPEC §11); nil for a conversation started by `agent run`.
	Agent *AgentRef `json:"agent,omitempty"`
	// StartedBy is who started the conversation (SPEC §21): the name of
	// the token that started it over agent serve's API; empty when not
	// known (a conversation started by `agent run`, or stored before it
	// was recorded).
	StartedBy string `json:"started_by,omitempty"`
	// Tenant is the conversation's tenant (SPEC §19), set when it was
	// created (agent serve's API, --tenant, the spec's tenant) and never
	// changed: every run of it, on any replica, carries it on its tasks.
	// Empty: none.
	Tenant string `json:"tenant,omitempty"`
	// FrontendTools are the tools a frontend offers the conversation's
	// model (SPEC §18: an AG-UI input's tools), as the last input that
	// carried them gave them: a call of one is an external call the
	// frontend answers. Nil when none.
	FrontendTools []FrontendTool `json:"frontend_tools,omitempty"`
}

// FrontendTool is a tool a frontend executes (SPEC §18): its name,
// description and the JSON Schema of its parameters, as the frontend
// declared them.
type FrontendTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// FrontendToolMeta is the metadata key (true) that marks a frontend
// tool's [tool.Tool]: its calls always block the run (the frontend runs
// them once the run ended), never non-blocking (SPEC §12).
const FrontendToolMeta = "frontend"

// Tool is d as an external tool (a call of it defers for its answer,
// marked with FrontendToolMeta),
// its name and parameters' schema checked as any tool's are (an error
// wrapping tool.ErrInvalidName or tool.ErrInvalidTool). Parameters
// empty or null: an object of any properties.
func (d FrontendTool) Tool() (*tool.Tool, error) {
	t, err := tool.New(tool.Def{Name: d.Name, Description: d.Description, Parameters: d.Parameters,
		Metadata: map[string]any{FrontendToolMeta: true}}, nil)
	if err != nil {
		return nil, fmt.Errorf("frontend tool %q: %w", d.Name, err)
	}
	return t, nil
}

// FrontendTool reports whether name is one of the conversation's
// frontend tools.
func (s *State) FrontendTool(name string) bool {
	return s != nil && slices.ContainsFunc(s.FrontendTools, func(t FrontendTool) bool { return t.Name == name })
}

// AgentRef is the agent a conversation runs with: the name of its spec
// and the digest of the spec it started with.
type AgentRef struct {
	// Name is the spec's name.
	Name string `json:"name"`
	// Digest is the spec's digest ("sha256:…").
	Digest string `json:"digest"`
}

// ArrivalKind says what arrived for a pending task.
type ArrivalKind string

const (
	// ArrivalDecision is a person's decision on an approval.
	ArrivalDecision ArrivalKind = "decision"
	// ArrivalAnswer is the result of an external call.
	ArrivalAnswer ArrivalKind = "answer"
	// ArrivalResult is a worker's result of a background task.
	ArrivalResult ArrivalKind = "result"
)

// Arrival is a message that resolves a pending task, kept until a run
// applies it.
type Arrival struct {
	// TaskID is the pending task it resolves.
	TaskID string `json:"task_id"`
	// Kind says what it is.
	Kind ArrivalKind `json:"kind"`
	// Data is the payload as received (a Decision, an Answer or a Result of
	// SPEC §5.2), already checked.
	Data json.RawMessage `json:"data"`
	// Seq is its sequence in its stream.
	Seq uint64 `json:"seq"`
	// At is when it was stored.
	At time.Time `json:"at"`
	// Trace is the W3C traceparent the message carried, if any (SPEC §14):
	// the approval span of a decision links to it.
	Trace string `json:"trace,omitempty"`
	// Verified, for a decision or an answer, says it carried the
	// service's valid signature (its by and channel are what the
	// service's face, inbox, API or signed link, authenticated, not only
	// what its publisher claims: SPEC §12, §21), or, for a decision, is
	// the call's timeout as its policy sets it.
	Verified bool `json:"verified,omitempty"`
}

// Checkpoint is the last stream sequence read per stream: messages up to
// it were applied, recorded as arrivals, or refused.
type Checkpoint struct {
	// Decisions is the last sequence read of the decisions stream.
	Decisions uint64 `json:"decisions,omitempty"`
	// Answers is the last sequence read of the answers stream.
	Answers uint64 `json:"answers,omitempty"`
	// Results is the last sequence read of the results stream.
	Results uint64 `json:"results,omitempty"`
}

// PendingTask returns the pending task with that ID, if any.
func (s *State) PendingTask(taskID string) (deferred.PendingTask, bool) {
	if s == nil || s.Pending == nil {
		return deferred.PendingTask{}, false
	}
	i := slices.IndexFunc(s.Pending.Tasks, func(t deferred.PendingTask) bool { return t.TaskID == taskID })
	if i < 0 {
		return deferred.PendingTask{}, false
	}
	return s.Pending.Tasks[i], true
}

// Unresolved returns what the conversation still waits for: the pending
// tasks with no arrival yet (in this pause or an earlier one), in the
// pending record's order, restricted to kinds when any are given. With
// deferred.KindApproval and deferred.KindExternal it is the deferred calls
// a resume must have answered before the model runs again; with
// deferred.KindBackground the background tasks still running.
func (s *State) Unresolved(kinds ...deferred.Kind) []deferred.PendingTask {
	if s == nil || s.Pending == nil {
		return nil
	}
	var out []deferred.PendingTask
	for _, t := range s.Pending.Tasks {
		if (len(kinds) == 0 || slices.Contains(kinds, t.Kind)) && !s.Arrived(t.TaskID) {
			out = append(out, t)
		}
	}
	return out
}

// Waiting returns the deferred calls that keep the conversation from
// being continued, in the pending record's order: every approval and
// external call without its answer while one of them blocks; when all of
// them are non-blocking (SPEC §12), none as soon as one outcome arrived
// for a non-blocking call or a background task is pending (the
// continuation waits for the others live), else those calls.
func (s *State) Waiting() []deferred.PendingTask {
	if s == nil || s.Pending == nil {
		return nil
	}
	var out []deferred.PendingTask
	blocking, moving := false, false
	for _, t := range s.Pending.Tasks {
		switch {
		case t.Background():
			moving = true
		case s.Arrived(t.TaskID):
			if t.NonBlocking {
				moving = true
			}
		default:
			out = append(out, t)
			if !t.NonBlocking {
				blocking = true
			}
		}
	}
	if !blocking && moving {
		return nil
	}
	return out
}

// Arrived reports whether something already arrived for the task, in this
// pause or an earlier one.
func (s *State) Arrived(taskID string) bool {
	return slices.Contains(s.Settled, taskID) || slices.ContainsFunc(s.Arrivals, func(a Arrival) bool { return a.TaskID == taskID })
}

// TakeSettledLive reports whether the task is settled and its result was
// consumed live by the run that settled it, and forgets the latter, so
// that only the first result read for it afterwards is taken for the one
// consumed: a second is a duplicate.
func (s *State) TakeSettledLive(taskID string) bool {
	i := slices.Index(s.SettledLive, taskID)
	if i < 0 {
		return false
	}
	s.SettledLive = slices.Delete(s.SettledLive, i, i+1)
	return true
}

// Clone returns a deep copy, so that a store and its caller never share
// mutable state.
func (s *State) Clone() *State {
	if s == nil {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic("conversation: state does not marshal: " + err.Error())
	}
	var out State
	if err := json.Unmarshal(b, &out); err != nil {
		panic("conversation: state does not unmarshal: " + err.Error())
	}
	return &out
}
