package liveview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Exit codes of the agent CLI (SPEC §6.1).
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitUsage       = 2
	ExitPaused      = 3
	ExitInterrupted = 130
)

// Exit is an error that carries a command's exit code (and, when Err is
// set, what it says).
type Exit struct {
	Code int
	Err  error
}

func (e *Exit) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *Exit) Unwrap() error { return e.Err }

// Printer writes a command's run: its events as JSON lines (SPEC §6.3,
// the final event with the exit code), or the live view on stderr and the
// final output on stdout (§6.2); and ends the command with its exit code
// (§6.1).
type Printer struct {
	stdout   io.Writer
	stderr   io.Writer
	json     bool
	mu       sync.Mutex
	enc      *json.Encoder
	final    *agent.Final
	convSeen bool
	convID   string // the conversation, for final events of no run
	runID    string
	// Resolve, when set, gives the commands that resolve a pending call.
	Resolve func(deferred.PendingTask) []string
	// ResumeHint, when set, is the command that continues a paused
	// conversation.
	ResumeHint string
	// Interrupted is the error of a command interrupted before its run
	// began (its context cancelled).
	Interrupted error
	// view is the live view on stderr (without JSON).
	view *View
}

// NewPrinter returns the printer of a command writing on stdout and
// stderr: JSON lines on stdout with jsonOut.
func NewPrinter(stdout, stderr io.Writer, jsonOut bool) *Printer {
	return &Printer{stdout: stdout, stderr: stderr, json: jsonOut, enc: json.NewEncoder(stdout), view: New(stderr),
		Interrupted: errors.New("interrupted")}
}

// Event writes ev (agent.RunOptions.OnEvent).
func (p *Printer) Event(ev agent.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.RunID != "" {
		p.runID = ev.RunID
	}
	if !p.convSeen && ev.ConversationID != "" {
		p.convSeen = true
		fmt.Fprintf(p.stderr, "conversation: %s\n", ev.ConversationID)
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

// Conversation names the conversation on stderr as soon as it is known
// (SPEC §6.2), once.
func (p *Printer) Conversation(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.convID = id
	if !p.convSeen {
		p.convSeen = true
		fmt.Fprintf(p.stderr, "conversation: %s\n", id)
	}
}

// Direct ends a command that ran no model (or whose run's outcome changed
// afterwards) with its own final event.
func (p *Printer) Direct(f *agent.Final) {
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

// Failed ends the command with err: its exit code (1 unless err says
// otherwise) and, with --json, a final event.
func (p *Printer) Failed(err error) error {
	var ee *Exit
	status := agent.StatusFailed
	switch {
	case errors.As(err, &ee):
	case errors.Is(err, context.Canceled): // interrupted before the run
		ee, status = &Exit{Code: ExitInterrupted, Err: fmt.Errorf("%w before the run started", p.Interrupted)}, agent.StatusInterrupted
	default:
		ee = &Exit{Code: ExitFailed, Err: err}
	}
	msg := ""
	if ee.Err != nil {
		msg = ee.Err.Error()
	}
	p.Direct(&agent.Final{Status: status, Error: msg, Err: ee})
	return ee
}

// Paused ends the command with the conversation still paused: exit 3,
// the pending calls listed.
func (p *Printer) Paused(pending []deferred.PendingTask) error {
	p.Direct(&agent.Final{Status: agent.StatusPaused, Pending: pending})
	if !p.json {
		WritePending(p.stdout, pending, p.Resolve)
	}
	WritePauseSummary(p.stderr, pending, p.ResumeHint)
	return &Exit{Code: ExitPaused}
}

// FinishWith ends a run whose state could not be saved: exit 1, with a
// final event saying so after the run's own.
func (p *Printer) FinishWith(res *agent.Result, err error) error {
	ee := &Exit{Code: ExitFailed, Err: err}
	f := &agent.Final{Status: agent.StatusFailed, Error: err.Error(), Err: ee}
	if res != nil {
		f.Usage = res.Usage
	}
	p.Direct(f)
	return ee
}

// Finish prints the outcome and maps it to the exit code.
func (p *Printer) Finish(_ *agent.Result, runErr error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.final
	if f == nil {
		// The run failed before it started (no events).
		return &Exit{Code: ExitFailed, Err: runErr}
	}
	if !p.json {
		switch f.Status {
		case agent.StatusFinished:
			fmt.Fprintln(p.stdout, f.Output)
		case agent.StatusPaused:
			WritePending(p.stdout, f.Pending, p.Resolve)
		}
	}
	if f.Status == agent.StatusPaused {
		WritePauseSummary(p.stderr, f.Pending, p.ResumeHint)
	}
	switch code := ExitCode(f); {
	case code == ExitOK:
		return nil
	case code == ExitPaused:
		return &Exit{Code: code}
	case f.Status == agent.StatusInterrupted && f.Error == "":
		return &Exit{Code: code, Err: errors.New("interrupted")}
	case f.Status == agent.StatusInterrupted:
		return &Exit{Code: code, Err: errors.New(f.Error)}
	default:
		return &Exit{Code: code, Err: runErr}
	}
}

// ExitCode is the exit code of a command that ends with f (SPEC §6.1):
// the code of the command's own error (an *Exit), else 0 finished, 3
// paused, 130 interrupted, 2 for a usage error of the run and 1 for any
// other failure.
func ExitCode(f *agent.Final) int {
	var ee *Exit
	if errors.As(f.Err, &ee) {
		return ee.Code
	}
	switch f.Status {
	case agent.StatusFinished:
		return ExitOK
	case agent.StatusPaused:
		return ExitPaused
	case agent.StatusInterrupted:
		return ExitInterrupted
	}
	var ue *agent.UserError
	if errors.As(f.Err, &ue) {
		return ExitUsage
	}
	return ExitFailed
}

// encode writes ev as a JSON line; a final event carries the command's
// exit code too (SPEC §6.3), which the agent library does not know.
func (p *Printer) encode(ev agent.Event) {
	if ev.Type != agent.EventFinal || ev.Final == nil {
		_ = p.enc.Encode(ev)
		return
	}
	_ = p.enc.Encode(finalLine{ev: ev, code: ExitCode(ev.Final)})
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
