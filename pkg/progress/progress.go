package progress

import (
	"context"
	"time"
)

// Reporter receives progress reports from a running tool. Implementations
// must be safe for concurrent use and should not block: a tool calls Report
// from its own goroutine while it works.
type Reporter interface {
	// Report records a human-readable message and, when known, the fraction
	// of the work done, between 0 and 1. A nil fraction means unknown.
	Report(message string, fraction *float64)
}

// ReporterFunc adapts a function to a [Reporter].
type ReporterFunc func(message string, fraction *float64)

// Report implements [Reporter].
func (f ReporterFunc) Report(message string, fraction *float64) { f(message, fraction) }

type ctxKey struct{}

// WithReporter returns a copy of ctx carrying r. A nil r returns ctx
// unchanged.
func WithReporter(ctx context.Context, r Reporter) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, r)
}

// FromContext returns the reporter carried by ctx, if any.
func FromContext(ctx context.Context) (Reporter, bool) {
	r, ok := ctx.Value(ctxKey{}).(Reporter)
	return r, ok
}

// Report sends a progress report to the reporter carried by ctx. It is a
// no-op when ctx carries none. A fraction outside [0, 1] is clamped; a nil
// fraction means unknown.
func Report(ctx context.Context, message string, fraction *float64) {
	r, ok := FromContext(ctx)
	if !ok {
		return
	}
	if fraction != nil {
		f := min(max(*fraction, 0), 1)
		fraction = &f
	}
	r.Report(message, fraction)
}

// Fraction returns a pointer to f, for the fraction argument of [Report].
func Fraction(f float64) *float64 { return &f }

// TaskReporter is implemented by reporters that also want to know which
// remote task a report comes from (the agent shows it in its progress
// events). Relaying code calls [ReportTask]; tools call [Report].
type TaskReporter interface {
	Reporter
	// ReportTask is Report for the remote task taskID.
	ReportTask(taskID, message string, fraction *float64)
}

// ReportTask relays a report of the remote task taskID to the reporter
// carried by ctx: through ReportTask when it is a [TaskReporter], else
// through Report. It is a no-op when ctx carries none.
func ReportTask(ctx context.Context, taskID, message string, fraction *float64) {
	r, ok := FromContext(ctx)
	if !ok {
		return
	}
	if fraction != nil {
		f := min(max(*fraction, 0), 1)
		fraction = &f
	}
	if tr, ok := r.(TaskReporter); ok {
		tr.ReportTask(taskID, message, fraction)
		return
	}
	r.Report(message, fraction)
}

// Queued is why a call waits in its tool's queue, held by a limit (SPEC
// §19): Reason is max_in_flight, rate, cool_down, paused or order (calls
// that go first wait), Ahead how many waiting calls go first, Key the
// limit's key and value it waits for ("tenant=acme", empty for the
// tool's own), Until when it may start at the earliest (zero: unknown).
type Queued struct {
	Reason string
	Ahead  int
	Key    string
	Until  time.Time
}

// QueueReporter is implemented by reporters that show a remote call held
// in its tool's queue as queued rather than as progress (the agent's
// queued events). Relaying code calls [ReportQueued].
type QueueReporter interface {
	// ReportQueued says that the remote task taskID waits in its tool's
	// queue for q; message says it in words.
	ReportQueued(taskID, message string, q Queued)
}

// ReportQueued relays that the remote task taskID waits in its tool's
// queue to the reporter carried by ctx: through ReportQueued when it is a
// [QueueReporter], else as a progress report of message. It is a no-op
// when ctx carries none.
func ReportQueued(ctx context.Context, taskID, message string, q Queued) {
	r, ok := FromContext(ctx)
	if !ok {
		return
	}
	if qr, ok := r.(QueueReporter); ok {
		qr.ReportQueued(taskID, message, q)
		return
	}
	ReportTask(ctx, taskID, message, nil)
}
