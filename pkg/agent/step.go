package agent

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// callKind classifies a tool call of a model response.
type callKind int

const (
	kindFunction callKind = iota // executed now
	kindUnknown                  // no such tool: a retry prompt
	kindApproval                 // RequiresApproval: deferred by kind
	kindExternal                 // external tool: deferred by kind
)

// slot is the processing state of one tool call of a response.
type slot struct {
	index int
	call  message.ToolCall
	t     *tool.Tool
	kind  callKind

	args     json.RawMessage // validated arguments
	override *string         // an approval's override arguments, validated instead of the call's
	held     error           // a deferral raised by the args validator
	approved bool
	metadata map[string]any // ToolCallMetadata of an approved call

	part    message.Part      // the call's result part, once it has one
	content []message.Content // extra user content from a tool.Return

	deferKind deferred.Kind // set when the call is (still) deferred
	deferMeta map[string]any
	deferTask string // the task ID the tool asked the deferral to keep
	effect    string // tool.EffectUnknown when its worker stopped while running it (SPEC §13)
	hasMeta   bool
	byKind    bool // deferred by its tool's kind rather than by raising

	callEmitted bool   // its tool_call event was sent
	skip        bool   // answered in the history already
	taskID      string // the task running it, named by a ToolCallPreparer
	dispatchID  string // the task of an inline call of a dispatched tool

	deferredTaskID string // the task ID it got when it was deferred
	stepTask       string // the task ID its recorded step names it by (once.go)
	again          bool   // stepTask was read from the stored step: its task may have been dispatched before
	attempt        int    // the attempt of its task: 0, or the next one after a worker deferred it
	answerNext     bool   // an external call whose answer goes to its next attempt (tool.AnswersNextAttempt)
	answerHolder   string // the worker that holds such a call's open work (tool.AnswerHolderMetaKey)
	ran            bool   // its tool was started
}

// rawArgs returns the arguments to validate: an approval's override, else
// the model's. The call part itself keeps the model's: a call deferred
// again is listed with the arguments a plain approval would run.
func (s *slot) rawArgs() string {
	if s.override != nil {
		return *s.override
	}
	return s.call.Args
}

// step handles the tool calls of the response at history[respIdx]. Without
// supplied results it is a first pass: function calls run, the others are
// deferred. With supplied results (a resume), every unprocessed call is
// answered from them. It returns the result parts for the next request and
// the deferred calls that remain unresolved, if any.
func (r *run) step(ctx context.Context, respIdx int, supplied *deferred.Results) ([]message.Part, *deferred.Requests, error) {
	resp := r.state.message(respIdx)
	tools, err := r.tools(ctx)
	if err != nil {
		return nil, nil, err
	}
	byName := make(map[string]*tool.Tool, len(tools))
	for _, t := range tools {
		byName[t.Name] = t
	}
	st := &stepState{}
	calls := resp.ToolCalls()
	slots := make([]*slot, 0, len(calls))
	var names []string // the tools' names, for the retry prompt of an unknown one
	for i, c := range calls {
		s := &slot{index: i, call: c, t: byName[c.ToolName]}
		switch {
		case s.t == nil:
			s.kind = kindUnknown
			if names == nil {
				names = toolNames(tools)
			}
		case s.t.Kind == tool.KindExternal:
			s.kind = kindExternal
		case s.t.RequiresApproval:
			s.kind = kindApproval
		}
		slots = append(slots, s)
	}
	defer r.state.endStep(st)
	done := r.state.answeredAfter(respIdx)
	for _, s := range slots {
		s.skip = done[s.call.ToolCallID]
	}
	st.rec = r.newStepRecord(respIdx, slots)

	fail := func(err error) ([]message.Part, *deferred.Requests, error) {
		// Record what ran, so that a continued history never repeats a
		// side effect; calls that did not run get cancelled returns.
		if errors.Is(err, context.Canceled) || errors.Is(err, ErrRunCancelled) || ranAny(slots) {
			r.cancelDangling(slots)
		}
		return nil, nil, err
	}
	var reqs *deferred.Requests
	if supplied == nil {
		reqs, err = r.firstPass(ctx, st, slots, names, respIdx)
	} else {
		reqs, err = r.resumePass(ctx, st, slots, names, respIdx, supplied)
	}
	if err != nil {
		return fail(err)
	}
	if reqs != nil {
		// Asking the handlers, like pausing, must not start once the run
		// was cancelled or interrupted.
		if err := r.alive(ctx); err != nil {
			return fail(err)
		}
		if reqs, err = r.resolveInline(ctx, st, slots, names, respIdx, reqs); err != nil {
			return fail(err)
		}
	}
	return resultParts(slots), reqs, nil
}

// toolNames lists the tools' names, quoted, for unknownToolText.
func toolNames(tools []*tool.Tool) []string {
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, "'"+t.Name+"'")
	}
	return names
}

func ranAny(slots []*slot) bool {
	for _, s := range slots {
		if s.ran {
			return true
		}
	}
	return false
}

// cancelDangling answers every call left without a result by a step that
// ends the run with a synthetic cancelled return, so the history stays well
// formed and records the results of the calls that did run.
func (r *run) cancelDangling(slots []*slot) {
	var parts []message.Part
	for _, s := range slots {
		if s.skip {
			continue
		}
		if s.part == nil {
			s.part = cancelledReturn(s.call)
		}
		parts = append(parts, s.part)
	}
	for _, s := range slots {
		if !s.skip && len(s.content) > 0 {
			parts = append(parts, message.UserPrompt{Content: s.content})
		}
	}
	r.keep(message.NewRequest(parts...))
}

func resultParts(slots []*slot) []message.Part {
	var parts []message.Part
	for _, s := range slots {
		if s.part != nil {
			parts = append(parts, s.part)
		}
	}
	for _, s := range slots {
		if s.part != nil && len(s.content) > 0 {
			parts = append(parts, message.UserPrompt{Content: s.content})
		}
	}
	return parts
}

func (r *run) firstPass(ctx context.Context, st *stepState, slots []*slot, names []string, respIdx int) (*deferred.Requests, error) {
	var exec []*slot
	for _, s := range slots {
		if !s.skip && (s.kind == kindFunction || s.kind == kindUnknown) {
			exec = append(exec, s)
		}
	}
	if err := r.precheck(len(exec)); err != nil {
		return nil, err
	}
	var runnable []*slot
	for _, s := range exec {
		if err := r.validate(ctx, st, s, names, false); err != nil {
			return nil, err
		}
		if s.part == nil {
			runnable = append(runnable, s)
		}
	}
	if err := r.executeAll(ctx, st, runnable); err != nil {
		return nil, err
	}
	// A call deferred before (a history continued without decisions) keeps
	// its task ID, also in its tool_call event.
	var record map[string]deferredEntry
	for _, k := range []callKind{kindExternal, kindApproval} {
		for _, s := range slots {
			if s.kind != k || s.skip {
				continue
			}
			if record == nil {
				record = r.state.deferredRecord(respIdx)
			}
			s.deferredTaskID = record[s.call.ToolCallID].TaskID
			if err := r.validate(ctx, st, s, names, true); err != nil {
				return nil, err
			}
			if s.part == nil {
				s.byKind = true
				s.deferKind = deferred.KindApproval
				if k == kindExternal {
					s.deferKind = deferred.KindExternal
				}
			}
		}
	}
	reqs, err := r.collectDeferred(slots, respIdx)
	if err != nil || reqs == nil {
		return reqs, err
	}
	// Stored before they are held or the run pauses: a continuation names
	// them as they were announced.
	return reqs, r.storeStep(ctx, st)
}
