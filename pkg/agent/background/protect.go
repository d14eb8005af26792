package background

import (
	"runtime/debug"

	"github.com/offload-dev/offload/pkg/agent"
)

// protect calls fn and turns a panic into an *agent.Panic error, so that a
// panicking in-process tool becomes a Panic outcome and the process
// survives (SPEC §9), as it does when the loop runs the call.
func protect(fn func() (any, error)) (val any, err error) {
	defer func() {
		if v := recover(); v != nil {
			val, err = nil, &agent.Panic{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}
