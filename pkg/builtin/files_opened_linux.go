//go:build linux

package builtin

import (
	"os"
	"strconv"
)

// openedPath returns the path of an open file as the kernel resolved it
// (/proc/self/fd/N): the file actually held, whatever links were swapped
// since, so that a check of it is not a check-then-open race.
func openedPath(f *os.File) (string, bool) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	return p, err == nil && len(p) > 0 && p[0] == '/'
}
