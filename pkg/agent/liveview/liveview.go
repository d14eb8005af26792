// Package liveview renders a run's events for a person watching a
// terminal (SPEC §6.2): what the model says before a tool call or another
// request, the tool calls and their results, the deferred calls and how
// they were resolved, and a live view of the background tasks (tool, task,
// elapsed time, last progress message), down to the tasks a paused run
// keeps for its resume. The final output is the caller's to print: a
// command writes the view on stderr and the output alone on stdout.
package liveview

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
)

// View writes the live view of one run (or of its continuations) to w.
// Give it the run's events in order, as agent.RunOptions.OnEvent receives
// them; it is not safe for concurrent use.
type View struct {
	w io.Writer
	// running are the live background tasks, by task ID, in start order
	// (order).
	running map[string]*liveTask
	order   []string
	// said is the text of the model's current response: shown once the
	// response turns out not to be the final one (a tool call or another
	// request follows), since the final output is the caller's.
	said strings.Builder
	// deferred names the deferred calls of the run by tool call ID, for
	// the lines that say how they were resolved.
	deferred map[string]deferredCall
}

// deferredCall is a deferred call of the view.
type deferredCall struct{ tool, task string }

// liveTask is a running background task of the view.
type liveTask struct {
	tool    string
	started time.Time
	last    string // last progress message
}

// New returns a view writing to w.
func New(w io.Writer) *View { return &View{w: w} }

// Event renders one event of the run.
func (v *View) Event(ev agent.Event) {
	switch ev.Type {
	case agent.EventTextDelta:
		v.said.WriteString(ev.Delta)
		return
	case agent.EventModelRequestRetry:
		v.said.Reset() // the failed attempt's deltas are void
		return
	case agent.EventFinal:
		v.said.Reset() // the final output is the caller's
		v.keptTasks(ev)
		return
	}
	if text := strings.TrimSpace(v.said.String()); text != "" {
		fmt.Fprintf(v.w, "model: %s\n", text)
	}
	v.said.Reset()
	switch ev.Type {
	case agent.EventDeferredToolRequests:
		v.deferredRequests(ev.Requests)
	case agent.EventDeferredToolResults:
		v.deferredResults(ev.Results)
	case agent.EventToolCall:
		task := ""
		if ev.TaskID != "" {
			task = " (task " + ev.TaskID + ")"
		}
		fmt.Fprintf(v.w, "→ %s %s%s\n", ev.Tool, compact(ev.Args), task)
	case agent.EventToolResult:
		fmt.Fprintf(v.w, "← %s %s: %s\n", ev.Tool, ev.Outcome, clip(message.ContentText(ev.Content), 200))
	case agent.EventProgress:
		pct := ""
		if ev.Fraction != nil {
			pct = fmt.Sprintf(" (%.0f%%)", *ev.Fraction*100)
		}
		task := ""
		if ev.TaskID != "" {
			task = " task " + ev.TaskID
		}
		elapsed := ""
		if lt := v.running[ev.TaskID]; lt != nil {
			lt.last = ev.Message + pct
			elapsed = " [" + since(lt.started, ev.At) + "]"
		}
		fmt.Fprintf(v.w, "… %s%s%s: %s%s\n", ev.Tool, task, elapsed, ev.Message, pct)
	case agent.EventQueued:
		v.queued(ev)
	case agent.EventBackgroundTaskStarted:
		if v.running == nil {
			v.running = map[string]*liveTask{}
		}
		v.running[ev.TaskID] = &liveTask{tool: ev.Tool, started: ev.At}
		v.order = append(v.order, ev.TaskID)
		fmt.Fprintf(v.w, "⇢ %s task %s running in the background\n", ev.Tool, ev.TaskID)
	case agent.EventBackgroundTaskFinished:
		elapsed := ""
		if lt := v.running[ev.TaskID]; lt != nil {
			elapsed = " after " + since(lt.started, ev.At)
			delete(v.running, ev.TaskID)
			v.order = slices.DeleteFunc(v.order, func(id string) bool { return id == ev.TaskID })
		}
		fmt.Fprintf(v.w, "⇠ %s task %s %s%s\n", ev.Tool, ev.TaskID, ev.Status, elapsed)
	case agent.EventModelRequestStarted:
		// The model's turn: say what still runs in the background.
		for _, id := range v.order {
			lt := v.running[id]
			last := ""
			if lt.last != "" {
				last = ": " + lt.last
			}
			fmt.Fprintf(v.w, "⋯ %s task %s running for %s%s\n", lt.tool, id, since(lt.started, ev.At), last)
		}
	}
}

// keptTasks says, when the run paused (a deferred call, SIGTERM), which
// background tasks run on for the resume: a detached task has not
// finished, and gets no finished event.
func (v *View) keptTasks(ev agent.Event) {
	if ev.Final == nil || ev.Final.Status != agent.StatusPaused {
		return
	}
	for _, pt := range ev.Final.Pending {
		if pt.Kind != deferred.KindBackground {
			continue
		}
		elapsed := ""
		if lt := v.running[pt.TaskID]; lt != nil {
			elapsed = " after " + since(lt.started, ev.At)
		}
		fmt.Fprintf(v.w, "⇠ %s task %s still running%s; kept for the resume\n", pt.Tool, pt.TaskID, elapsed)
	}
}

// deferredRequests says which calls wait for a decision or an answer.
func (v *View) deferredRequests(reqs *deferred.Requests) {
	if reqs == nil {
		return
	}
	if v.deferred == nil {
		v.deferred = map[string]deferredCall{}
	}
	for _, c := range reqs.Approvals {
		v.deferred[c.ToolCallID] = deferredCall{c.ToolName, reqs.TaskIDs[c.ToolCallID]}
		fmt.Fprintf(v.w, "? %s task %s needs approval\n", c.ToolName, reqs.TaskIDs[c.ToolCallID])
	}
	for _, c := range reqs.Calls {
		v.deferred[c.ToolCallID] = deferredCall{c.ToolName, reqs.TaskIDs[c.ToolCallID]}
		fmt.Fprintf(v.w, "? %s task %s waits for an answer from outside\n", c.ToolName, reqs.TaskIDs[c.ToolCallID])
	}
}

// deferredResults says how deferred calls were resolved within the run
// (--approve all|none|ask|wait).
func (v *View) deferredResults(res *deferred.Results) {
	if res == nil {
		return
	}
	say := func(id, what string) {
		dc, ok := v.deferred[id]
		if !ok {
			dc = deferredCall{tool: "call " + id}
		}
		task := ""
		if dc.task != "" {
			task = " task " + dc.task
		}
		fmt.Fprintf(v.w, "! %s%s %s\n", dc.tool, task, what)
	}
	for _, id := range slices.Sorted(maps.Keys(res.Approvals)) {
		switch v := res.Approvals[id].(type) {
		case bool:
			if v {
				say(id, "approved")
			} else {
				say(id, "denied")
			}
		case deferred.ToolApproved:
			say(id, "approved")
		case deferred.ToolDenied:
			if v.Reason == deferred.ReasonExpired {
				say(id, "not approved in time: "+v.Text())
			} else {
				say(id, "denied: "+v.Text())
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(res.Calls)) {
		say(id, "answered")
	}
}

// since renders the time from start to now, in whole seconds.
func since(start, now time.Time) string {
	return now.Sub(start).Truncate(time.Second).String()
}

func compact(raw json.RawMessage) string {
	var x any
	if json.Unmarshal(raw, &x) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(x)
	return string(b)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// queued prints that a call waits in its tool's queue (SPEC §19), as its
// progress: "⏸ tool task T: queued: rate limit of tool T, 3 ahead".
func (v *View) queued(ev agent.Event) {
	task := ""
	if ev.TaskID != "" {
		task = " task " + ev.TaskID
	}
	if lt := v.running[ev.TaskID]; lt != nil {
		lt.last = ev.Message
	}
	fmt.Fprintf(v.w, "⏸ %s%s: %s\n", ev.Tool, task, ev.Message)
}
