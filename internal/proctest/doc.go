// Package proctest runs a test's binaries as a user would: it builds main
// packages once per test package ([Binaries]) or into a directory
// ([Build]), runs them with their output captured line by line
// ([Process]: kill, restart, wait for a log line) and finds free ports.
// Only tests import it; the NATS helpers (an in-process server, a
// nats-server process, the nats CLI) are natsjs/natstest's.
package proctest
