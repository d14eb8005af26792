//go:build !linux

package builtin

import "os"

// openedPath is not known outside Linux: the file tools check the path
// before opening it only (see [files.checkOpened]).
func openedPath(*os.File) (string, bool) { return "", false }
