//go:build !linux

package proc

// SentinelMain returns at once: outside Linux a reaper has no sentinel
// (see the Linux version).
func SentinelMain() {}
