// Package proc runs the commands of command-backed and built-in tools: in
// their own process group, killed whole on every exit path (the command
// exited, timed out or was cancelled), so that no background child outlives
// its task, with a minimal environment that never carries the process's
// secrets (SPEC §6.5), and, under root, as an unprivileged user with every
// privilege dropped ([User], [Runner]), so that they cannot read the
// process's environment or memory. With a [Reaper], what they detached
// is killed too, and so is everything they left running when the process
// itself ends, SIGKILLed included (its sentinel: a binary that makes a
// Reaper calls [SentinelMain] first in main).
package proc
