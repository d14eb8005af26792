package agent

// This file keeps a step done once (SPEC §20) in a run with a
// [StepRecorder] (a durable conversation's): the model's response is
// stored with its step record before any of its calls runs, each call
// named by the task it runs as; an in-process tool not declared
// idempotent is marked started before it runs; and the outcomes of the
// step's calls are stored as they end while others still run. A run that
// continues the stored conversation after the process died takes the
// stored response (no second model request), runs only the calls without
// a stored outcome, and makes a call started and not finished an unknown
// effect for a person (SPEC §13) rather than run it again.

import (
	"cmp"
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// stepMetaKey is the key, in a response's Metadata, of its step record:
// tool call ID → {"task_id", "started"}.
const stepMetaKey = "offload.step"

// stepEntry is one call of a step record.
type stepEntry struct {
	// TaskID names the call's task: the task a worker runs, the task a
	// person answers, the idempotency key of an in-process tool.
	TaskID string `json:"task_id"`
	// Started is set once the call's in-process tool, not declared
	// idempotent, was started.
	Started *stepStart `json:"started,omitempty"`
}

// stepStart records the start of an in-process tool.
type stepStart struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	RunID   string    `json:"run_id"`
}

// stepRecord is what a step keeps of its record while it runs. Its
// fields are guarded by mu, which is held while a record is stored, so
// that each stores at least what the one before stored.
type stepRecord struct {
	mu      sync.Mutex
	respIdx int
	entries map[string]stepEntry
	dirty   bool           // changed since it was last stored
	done    []message.Part // the outcomes of the calls that ended
	running int            // calls of the batch under way
}

// recorders returns the run's StepRecorders.
func (r *run) recorders() []StepRecorder {
	var out []StepRecorder
	for _, c := range r.caps {
		if h, ok := c.(StepRecorder); ok {
			out = append(out, h)
		}
	}
	return out
}

// newStepRecord reads the step record of the response at respIdx and,
// when the run records its steps, names each call of slots that has none;
// it is nil when the run records none and the response has none (a
// response stored with one is honoured by any run that continues it). A
// call whose ID another call of the response has already is not recorded
// (it cannot be told apart on a continuation).
func (r *run) newStepRecord(respIdx int, slots []*slot) *stepRecord {
	entries := r.state.stepEntries(respIdx)
	if !r.records && len(entries) == 0 {
		return nil
	}
	rec := &stepRecord{respIdx: respIdx, entries: entries}
	seen := make(map[string]bool, len(slots))
	for _, s := range slots {
		id := s.call.ToolCallID
		if seen[id] {
			continue
		}
		seen[id] = true
		if s.skip {
			continue
		}
		e, ok := rec.entries[id]
		if !ok && !r.records {
			continue
		}
		if !ok {
			e = stepEntry{TaskID: ulid.Make().String()}
			rec.entries[id] = e
			rec.dirty = true
		}
		s.stepTask, s.again = e.TaskID, ok
	}
	return rec
}

// stepEntries reads the step record kept in the response's metadata (it
// survives a JSON round trip as map[string]any).
func (s *runState) stepEntries(respIdx int) map[string]stepEntry {
	s.mu.Lock()
	raw, ok := s.history[respIdx].Metadata[stepMetaKey]
	s.mu.Unlock()
	out := map[string]stepEntry{}
	if !ok {
		return out
	}
	if b, err := json.Marshal(raw); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

// setStepEntries keeps the step record in the response's metadata.
func (s *runState) setStepEntries(respIdx int, entries map[string]stepEntry) {
	m := make(map[string]any, len(entries))
	for id, e := range entries {
		v := map[string]any{"task_id": e.TaskID}
		if st := e.Started; st != nil {
			v["started"] = map[string]any{"attempt": st.Attempt, "at": st.At.UTC().Format(time.RFC3339Nano), "run_id": st.RunID}
		}
		m[id] = v
	}
	s.setResponseMeta(respIdx, stepMetaKey, m)
}

// hasStepRecord reports whether response m was stored with a step record:
// a step that a process began and may not have finished.
func hasStepRecord(m message.Message) bool {
	_, ok := m.Metadata[stepMetaKey]
	return ok
}

// once reports whether s is a call of an in-process tool not declared
// idempotent, of a recorded step: one that must not run twice.
func (s *slot) once() bool {
	return s.stepTask != "" && s.t != nil && !s.t.Dispatched && !s.t.Idempotent
}

// beginBatch prepares a batch of calls about to start: a call of an
// in-process tool not declared idempotent that a process started before
// without storing its outcome is not run again but held as an unknown
// effect (SPEC §13); the others are marked started. The step record is
// stored first when it changed (the response's first batch, a mark).
func (r *run) beginBatch(ctx context.Context, st *stepState, batch []*slot) error {
	rec := st.rec
	if rec == nil {
		return nil
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range batch {
		if !s.once() || s.held != nil {
			continue
		}
		id := s.call.ToolCallID
		e := rec.entries[id]
		if e.Started != nil && e.Started.Attempt == s.attempt {
			s.held = unknownEffect(cmp.Or(s.deferredTaskID, e.TaskID), e.Started)
			continue
		}
		e.Started = &stepStart{Attempt: s.attempt, At: time.Now().UTC(), RunID: r.runID}
		rec.entries[id] = e
		rec.dirty = true
	}
	rec.running = len(batch)
	return r.storeLocked(ctx, st)
}

// unknownEffect is the deferral of a call whose in-process tool was
// started by a process that stopped before storing its outcome: a person
// decides (approved, it runs as the task's next attempt).
func unknownEffect(taskID string, started *stepStart) error {
	return &tool.ApprovalRequired{TaskID: taskID, Metadata: map[string]any{
		tool.EffectMetaKey: tool.EffectUnknown,
		"run_id":           started.RunID,
		"started_at":       started.At.UTC().Format(time.RFC3339Nano),
	}}
}

// callEnded records the outcome of s, a call of the batch under way: it is
// stored at once while other calls of the batch still run; the last one's
// is stored with what comes next (the next batch, the step's deferred
// calls, the next request). A call deferred by its tool has no outcome:
// its start mark is taken back, so that a continuation runs it again
// (and it defers again) rather than take it for an unknown effect.
func (r *run) callEnded(ctx context.Context, st *stepState, s *slot) error {
	rec := st.rec
	if rec == nil {
		return nil
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.running--
	switch {
	case s.part != nil:
		rec.done = append(rec.done, s.part)
		if len(s.content) > 0 {
			rec.done = append(rec.done, message.UserPrompt{Content: s.content})
		}
	case s.ran && s.once():
		e := rec.entries[s.call.ToolCallID]
		e.Started = nil
		rec.entries[s.call.ToolCallID] = e
	default:
		return nil
	}
	rec.dirty = true
	if rec.running <= 0 {
		return nil
	}
	return r.storeLocked(ctx, st)
}

// storeStep stores the step record if it changed: before the step's
// deferred calls are held or paused, so that their task IDs and the
// outcomes of the calls that ran are the stored ones.
func (r *run) storeStep(ctx context.Context, st *stepState) error {
	if st.rec == nil {
		return nil
	}
	st.rec.mu.Lock()
	defer st.rec.mu.Unlock()
	return r.storeLocked(ctx, st)
}

// storeLocked has the StepRecorders store the history with the step
// record and the outcomes so far, if anything changed since the last time.
func (r *run) storeLocked(ctx context.Context, st *stepState) error {
	rec := st.rec
	if !rec.dirty || !r.records {
		return nil
	}
	r.state.setStepEntries(rec.respIdx, rec.entries)
	done := append([]message.Part(nil), rec.done...)
	for _, c := range r.caps {
		if h, ok := c.(StepRecorder); ok {
			if err := h.RecordStep(ctx, r.info, done); err != nil {
				return err
			}
		}
	}
	rec.dirty = false
	return nil
}

// idempotencyKey is the key of attempt of task, "<task>:<attempt>" (SPEC
// §13), or "" without a task.
func idempotencyKey(task string, attempt int) string {
	if task == "" {
		return ""
	}
	return task + ":" + strconv.Itoa(attempt)
}
