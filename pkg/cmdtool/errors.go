package cmdtool

import (
	"context"
	"fmt"
	"time"
)

// CommandFailed is returned when a tool's command exits with a code other
// than 0 (or is killed by a signal). The model sees only its type name.
type CommandFailed struct {
	// Tool is the tool's name.
	Tool string
	// ExitCode is the command's exit code; -1 when a signal killed it.
	ExitCode int
	// Stderr is the tail of the command's standard error, for logs. It is
	// never part of Error().
	Stderr string
}

// Error implements error. It does not include stderr.
func (e *CommandFailed) Error() string {
	return fmt.Sprintf("cmdtool: tool %s: command exited with code %d", e.Tool, e.ExitCode)
}

// ResultTooLarge is returned when a tool's command writes more than
// [MaxOutputBytes] on stdout.
type ResultTooLarge struct {
	// Tool is the tool's name.
	Tool string
	// Limit is the maximum size of stdout in bytes.
	Limit int64
}

// Error implements error.
func (e *ResultTooLarge) Error() string {
	return fmt.Sprintf("cmdtool: tool %s: result exceeds %d bytes", e.Tool, e.Limit)
}

// DeadlineExceeded is returned when a tool's command runs longer than its
// timeout and is killed. errors.Is(err, context.DeadlineExceeded) holds.
type DeadlineExceeded struct {
	// Tool is the tool's name.
	Tool string
	// Timeout is the tool's timeout.
	Timeout time.Duration
}

// Error implements error.
func (e *DeadlineExceeded) Error() string {
	return fmt.Sprintf("cmdtool: tool %s: command timed out after %s", e.Tool, e.Timeout)
}

// Unwrap returns context.DeadlineExceeded.
func (e *DeadlineExceeded) Unwrap() error { return context.DeadlineExceeded }

// InvalidOutput is returned when a tool declared with output: json writes
// something on stdout that is not JSON.
type InvalidOutput struct {
	// Tool is the tool's name.
	Tool string
	// Err is the JSON parser's error.
	Err error
}

// Error implements error.
func (e *InvalidOutput) Error() string {
	return fmt.Sprintf("cmdtool: tool %s: output is not valid JSON: %v", e.Tool, e.Err)
}

// Unwrap returns the JSON parser's error.
func (e *InvalidOutput) Unwrap() error { return e.Err }
