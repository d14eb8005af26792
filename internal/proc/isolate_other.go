//go:build !linux

package proc

// NoDump does nothing outside Linux (see the Linux version).
func NoDump() error { return nil }

// Dumpable reports true outside Linux.
func Dumpable() (bool, error) { return true, nil }
