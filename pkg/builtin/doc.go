// Package builtin holds the toolworker's built-in tools (SPEC §6.5):
//
//   - http_fetch: GET or HEAD an http(s) URL, with size and time limits;
//   - read_file, list_dir, write_file: files under a root directory
//     (write_file requires approval);
//   - shell: run a command with /bin/sh in the root directory (requires
//     approval; timeout);
//   - sleep: wait, reporting progress (for demos and tests).
//
// [Tools] builds them from a [Config]; [Names] lists their names.
//
// # Confinement
//
// The file tools resolve every path inside Config.Root with [os.Root]: a
// relative path is relative to the root, an absolute path must lie inside
// it, and neither ".." nor a symbolic link may lead out of it. Paths that
// would escape fail with a message naming the path.
//
// # Outcomes
//
// Problems the model can act on (a missing file, an HTTP transport error, a
// shell timeout, an oversize file) are [tool.ToolFailed] errors with a clear
// message. An HTTP status of 400 or more is a result, not an error. A
// non-zero shell exit code is a result too. When the call's context is
// cancelled, the tools stop (shell kills its process group) and return the
// context's error.
package builtin
