package agent

import (
	"errors"
	"log/slog"
	"runtime/debug"
)

// protect calls fn and turns a panic into a *Panic error, so that a
// panicking in-process tool becomes a Panic outcome and the process
// survives (SPEC §9).
func protect(fn func() (any, error)) (val any, err error) {
	defer func() {
		if v := recover(); v != nil {
			val, err = nil, &Panic{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// panicStack returns the log attribute of a panic's stack, if err is one.
func panicStack(err error) []any {
	var p *Panic
	if errors.As(err, &p) {
		return []any{slog.String("stack", string(p.Stack))}
	}
	return nil
}
