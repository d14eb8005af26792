package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
)

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
		_ = p.enc.Encode(agent.Event{Type: agent.EventFinal, RunID: p.runID, ConversationID: p.convID, At: time.Now().UTC(), Final: f})
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
	p.direct(&agent.Final{Status: status, Error: msg, ExitCode: ee.code})
	return ee
}

// paused ends the command with the conversation still paused: exit 3,
// the pending calls listed.
func (p *printer) paused(pending []deferred.PendingTask) error {
	p.direct(&agent.Final{Status: agent.StatusPaused, Pending: pending, ExitCode: exitPaused})
	if !p.json {
		writePending(p.e.stdout, pending, p.resolve)
	}
	writePauseSummary(p.e.stderr, pending, p.resumeHint)
	return &exitError{code: exitPaused}
}

// finishWith ends a run whose state could not be saved: exit 1, with a
// final event saying so after the run's own.
func (p *printer) finishWith(res *agent.Result, err error) error {
	f := &agent.Final{Status: agent.StatusFailed, Error: err.Error(), ExitCode: exitFailed}
	if res != nil {
		f.Usage = res.Usage
	}
	p.direct(f)
	return &exitError{code: exitFailed, err: err}
}
