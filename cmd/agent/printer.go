package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// printer writes a run's events: JSON lines with --json, else a short live
// view on stderr and the final output on stdout.
type printer struct {
	e        env
	json     bool
	mu       sync.Mutex
	enc      *json.Encoder
	final    *agent.Final
	convSeen bool
	convID   string // the conversation, for final events of no run
	runID    string
	// resolve, when set, gives the commands that resolve a pending call.
	resolve func(deferred.PendingTask) []string
	// resumeHint, when set, is the command that continues a paused
	// conversation.
	resumeHint string
	// view is the live view on stderr (without --json).
	view *liveview.View
}

func newPrinter(e env, jsonOut bool) *printer {
	return &printer{e: e, json: jsonOut, enc: json.NewEncoder(e.stdout), view: liveview.New(e.stderr)}
}

func (p *printer) event(ev agent.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.RunID != "" {
		p.runID = ev.RunID
	}
	if !p.convSeen && ev.ConversationID != "" {
		p.convSeen = true
		fmt.Fprintf(p.e.stderr, "conversation: %s\n", ev.ConversationID)
	}
	if ev.Type == agent.EventFinal {
		p.final = ev.Final
	}
	if p.json {
		p.encode(ev)
		return
	}
	p.view.Event(ev)
}

// conversation names the conversation on stderr as soon as it is known
// (SPEC §6.2), once.
func (p *printer) conversation(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.convID = id
	if !p.convSeen {
		p.convSeen = true
		fmt.Fprintf(p.e.stderr, "conversation: %s\n", id)
	}
}

// direct ends a command that ran no model (or whose run's outcome changed
// afterwards) with its own final event.
func (p *printer) direct(f *agent.Final) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.final = f
	if p.json {
		if p.runID == "" {
			p.runID = protocol.NewID()
		}
		p.encode(agent.Event{Type: agent.EventFinal, RunID: p.runID, ConversationID: p.convID, At: time.Now().UTC(), Final: f})
	}
}

// failed ends the command with err: its exit code (1 unless err says
// otherwise) and, with --json, a final event.
func (p *printer) failed(err error) error {
	var ee *exitError
	status := agent.StatusFailed
	switch {
	case errors.As(err, &ee):
	case errors.Is(err, context.Canceled): // SIGINT before the run
		ee, status = &exitError{code: exitInterrupted, err: fmt.Errorf("%w before the run started", errInterrupted)}, agent.StatusInterrupted
	default:
		ee = &exitError{code: exitFailed, err: err}
	}
	msg := ""
	if ee.err != nil {
		msg = ee.err.Error()
	}
	p.direct(&agent.Final{Status: status, Error: msg, Err: ee})
	return ee
}

// paused ends the command with the conversation still paused: exit 3,
// the pending calls listed.
func (p *printer) paused(pending []deferred.PendingTask) error {
	p.direct(&agent.Final{Status: agent.StatusPaused, Pending: pending})
	if !p.json {
		liveview.WritePending(p.e.stdout, pending, p.resolve)
	}
	liveview.WritePauseSummary(p.e.stderr, pending, p.resumeHint)
	return &exitError{code: exitPaused}
}

// finishWith ends a run whose state could not be saved: exit 1, with a
// final event saying so after the run's own.
func (p *printer) finishWith(res *agent.Result, err error) error {
	ee := &exitError{code: exitFailed, err: err}
	f := &agent.Final{Status: agent.StatusFailed, Error: err.Error(), Err: ee}
	if res != nil {
		f.Usage = res.Usage
	}
	p.direct(f)
	return ee
}

// finish prints the outcome and maps it to the exit code.
func (p *printer) finish(_ *agent.Result, runErr error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.final
	if f == nil {
		// The run failed before it started (no events).
		return &exitError{code: exitFailed, err: runErr}
	}
	if !p.json {
		switch f.Status {
		case agent.StatusFinished:
			fmt.Fprintln(p.e.stdout, f.Output)
		case agent.StatusPaused:
			liveview.WritePending(p.e.stdout, f.Pending, p.resolve)
		}
	}
	if f.Status == agent.StatusPaused {
		liveview.WritePauseSummary(p.e.stderr, f.Pending, p.resumeHint)
	}
	switch code := exitCodeOf(f); {
	case code == exitOK:
		return nil
	case code == exitPaused:
		return &exitError{code: code}
	case f.Status == agent.StatusInterrupted && f.Error == "":
		return &exitError{code: code, err: errors.New("interrupted")}
	case f.Status == agent.StatusInterrupted:
		return &exitError{code: code, err: errors.New(f.Error)}
	default:
		return &exitError{code: code, err: runErr}
	}
}

// exitCodeOf is the exit code of a command that ends with f (SPEC §6.1):
// the code of the command's own error, else 0 finished, 3 paused, 130
// interrupted, 2 for a usage error of the run and 1 for any other failure.
func exitCodeOf(f *agent.Final) int {
	var ee *exitError
	if errors.As(f.Err, &ee) {
		return ee.code
	}
	switch f.Status {
	case agent.StatusFinished:
		return exitOK
	case agent.StatusPaused:
		return exitPaused
	case agent.StatusInterrupted:
		return exitInterrupted
	}
	var ue *agent.UserError
	if errors.As(f.Err, &ue) {
		return exitUsage
	}
	return exitFailed
}

// encode writes ev as a --json line; a final event carries the command's
// exit code too (SPEC §6.3), which the agent library does not know.
func (p *printer) encode(ev agent.Event) {
	if ev.Type != agent.EventFinal || ev.Final == nil {
		_ = p.enc.Encode(ev)
		return
	}
	_ = p.enc.Encode(finalLine{ev: ev, code: exitCodeOf(ev.Final)})
}

// finalLine is a final event's JSON line: the event's fields and
// exit_code.
type finalLine struct {
	ev   agent.Event
	code int
}

// MarshalJSON implements json.Marshaler.
func (l finalLine) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(l.ev)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	fields["exit_code"], _ = json.Marshal(l.code)
	return json.Marshal(fields)
}

// commandsOf returns the commands that answer and continue a paused
// conversation of the flags' server (SPEC §6.1).
func commandsOf(f *runFlags, embedded bool) liveview.Commands {
	return liveview.Commands{Embedded: embedded, Store: f.store, Prefix: f.prefix, Server: natsjs.RedactURL(f.conn.URL),
		Context: f.conn.Context, Creds: f.conn.Creds, Nkey: f.conn.Nkey, Spec: f.spec} // its external tools and instructions are not stored
}

// resolveCommands returns the function that lists, for a pending call of
// conversation conv, the commands that resolve it.
func resolveCommands(f *runFlags, embedded bool, conv string) func(deferred.PendingTask) []string {
	c := commandsOf(f, embedded)
	return func(p deferred.PendingTask) []string { return c.Resolve(conv, p) }
}

// resumeHint returns the command that continues conversation conv once its
// pending calls are answered.
func resumeHint(f *runFlags, embedded bool, conv string) string {
	return commandsOf(f, embedded).Resume(conv)
}
