// Package proc runs the commands of command-backed and built-in tools: in
// their own process group, killed whole on every exit path (the command
// exited, timed out or was cancelled), so that no background child outlives
// its task, and with a minimal environment that never carries the process's
// secrets (SPEC §6.5).
package proc
