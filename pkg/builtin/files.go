package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// ReadFileArgs are the arguments of read_file.
type ReadFileArgs struct {
	// Path is the file's path, relative to the root.
	Path string `json:"path" jsonschema:"The file's path, relative to the root directory."`
}

// ReadFileResult is the result of read_file.
type ReadFileResult struct {
	// Path is the file's cleaned path, relative to the root.
	Path string `json:"path"`
	// Content is the file's text.
	Content string `json:"content"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
}

// ListDirArgs are the arguments of list_dir.
type ListDirArgs struct {
	// Path is the directory's path, relative to the root; defaults to ".".
	Path string `json:"path,omitempty" jsonschema:"The directory's path, relative to the root directory. Defaults to the root itself."`
}

// ListDirResult is the result of list_dir.
type ListDirResult struct {
	// Path is the directory's cleaned path, relative to the root.
	Path string `json:"path"`
	// Entries are the directory's entries, sorted by name.
	Entries []DirEntry `json:"entries"`
	// Truncated is true when the directory holds more than [MaxDirEntries]
	// entries and only the first ones are listed.
	Truncated bool `json:"truncated,omitempty"`
}

// DirEntry is one entry of a [ListDirResult].
type DirEntry struct {
	// Name is the entry's name.
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	// Size is the size in bytes (of the link itself for a symlink).
	Size int64 `json:"size"`
}

// WriteFileArgs are the arguments of write_file.
type WriteFileArgs struct {
	// Path is the file's path, relative to the root.
	Path string `json:"path" jsonschema:"The file's path, relative to the root directory. Missing parent directories are created."`
	// Content is the text to write; it replaces the file's content.
	Content string `json:"content" jsonschema:"The text to write. It replaces the file's content."`
}

// WriteFileResult is the result of write_file.
type WriteFileResult struct {
	// Path is the file's cleaned path, relative to the root.
	Path string `json:"path"`
	// BytesWritten is the number of bytes written.
	BytesWritten int `json:"bytes_written"`
}

// files implements the file tools over one root directory.
type files struct {
	root string // absolute
	deny []string
	log  *slog.Logger
}

// realPath resolves the symbolic links of p (absolute); for a path that does
// not exist yet, those of its longest existing prefix.
func realPath(p string) string {
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether p is dir or under it (both cleaned, absolute).
func within(p, dir string) bool {
	r, err := filepath.Rel(dir, p)
	return err == nil && (r == "." || filepath.IsLocal(r))
}

// refused fails when the cleaned root-relative path p, symbolic links
// resolved, is one of the denied paths or under one.
func (f *files) refused(op, p, shown string) error {
	if len(f.deny) == 0 {
		return nil
	}
	real := realPath(filepath.Join(f.root, p))
	for _, d := range f.deny {
		if within(real, d) {
			return fail("%s: %s: access to this path is not allowed", op, shown)
		}
	}
	return nil
}

// checkOpened fails when the open file is one of the denied paths or under
// one. It checks what was opened, not a path resolved before the open:
// a symbolic link swapped between [files.refused] and the open (a process
// flipping links in the root) cannot take the tools into the store. On
// Linux only (/proc/self/fd); elsewhere refused's check before the open is
// the only one.
func (f *files) checkOpened(op string, file *os.File, shown string) error {
	if len(f.deny) == 0 {
		return nil
	}
	real, ok := openedPath(file)
	if !ok {
		return nil
	}
	for _, d := range f.deny {
		if within(real, d) {
			return fail("%s: %s: access to this path is not allowed", op, shown)
		}
	}
	return nil
}

func (f *files) readTool() (*tool.Tool, error) {
	return tool.NewFunc(NameReadFile,
		fmt.Sprintf("Read a text file under the root directory (at most %s).", size(MaxFileBytes)),
		f.read, tool.Idempotent(), tool.Timeout(FileTimeout)) // reads only: running it again changes nothing
}

func (f *files) listTool() (*tool.Tool, error) {
	return tool.NewFunc(NameListDir,
		"List a directory under the root directory: each entry's name, type (file, dir, symlink or other) and size in bytes.",
		f.list, tool.Idempotent(), tool.Timeout(FileTimeout)) // reads only
}

func (f *files) writeTool() (*tool.Tool, error) {
	return tool.NewFunc(NameWriteFile,
		fmt.Sprintf("Write a text file under the root directory (at most %s), replacing its content and creating missing parent directories.", size(MaxFileBytes)),
		f.write, tool.NeedsApproval(), tool.Timeout(FileTimeout))
}

// rel returns p as a clean path relative to the root, or a failure when it
// lexically leaves the root. Symbolic links are checked by os.Root.
func (f *files) rel(op, p string) (string, error) {
	if p == "" {
		return "", fail("%s: path is empty", op)
	}
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(f.root, filepath.Clean(p))
		if err != nil || !filepath.IsLocal(r) && r != "." {
			return "", fail("%s: %s is outside the root directory", op, p)
		}
		p = r
	}
	c := filepath.Clean(p)
	if c != "." && !filepath.IsLocal(c) {
		return "", fail("%s: %s is outside the root directory", op, p)
	}
	return c, nil
}

// open opens the root; each call opens its own so that no descriptor
// outlives a call.
func (f *files) open(op string) (*os.Root, error) {
	r, err := os.OpenRoot(f.root)
	if err != nil {
		return nil, fmt.Errorf("builtin: %s: %w", op, err)
	}
	return r, nil
}

// fsFail turns a file system error into a failure the model can act on.
func fsFail(op, path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail("%s: %s does not exist", op, path)
	case errors.Is(err, fs.ErrPermission):
		return fail("%s: %s: permission denied", op, path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if strings.Contains(err.Error(), "escapes") {
		return fail("%s: %s is outside the root directory", op, path)
	}
	return fail("%s: %s: %v", op, path, err)
}

func (f *files) read(ctx context.Context, _ *tool.RunContext, a ReadFileArgs) (ReadFileResult, error) {
	p, err := f.rel(NameReadFile, a.Path)
	if err != nil {
		return ReadFileResult{}, err
	}
	if err := f.refused(NameReadFile, p, a.Path); err != nil {
		return ReadFileResult{}, err
	}
	root, err := f.open(NameReadFile)
	if err != nil {
		return ReadFileResult{}, err
	}
	defer root.Close()
	// Non-blocking: opening a FIFO must not wait for a writer. Every check
	// is of the file opened, so none races a swapped link.
	file, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ReadFileResult{}, fsFail(NameReadFile, a.Path, err)
	}
	defer file.Close()
	if err := f.checkOpened(NameReadFile, file, a.Path); err != nil {
		return ReadFileResult{}, err
	}
	fi, err := file.Stat()
	if err != nil {
		return ReadFileResult{}, fsFail(NameReadFile, a.Path, err)
	}
	if fi.IsDir() {
		return ReadFileResult{}, fail("%s: %s is a directory; use %s", NameReadFile, a.Path, NameListDir)
	}
	if !fi.Mode().IsRegular() {
		return ReadFileResult{}, fail("%s: %s is not a regular file", NameReadFile, a.Path)
	}
	if fi.Size() > MaxFileBytes {
		return ReadFileResult{}, fail("%s: %s is %d bytes, over the limit of %d bytes", NameReadFile, a.Path, fi.Size(), MaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(file, MaxFileBytes+1))
	if err != nil {
		return ReadFileResult{}, fsFail(NameReadFile, a.Path, err)
	}
	if len(data) > MaxFileBytes {
		return ReadFileResult{}, fail("%s: %s is over the limit of %d bytes", NameReadFile, a.Path, MaxFileBytes)
	}
	if !utf8.Valid(data) {
		return ReadFileResult{}, fail("%s: %s is not UTF-8 text", NameReadFile, a.Path)
	}
	res := ReadFileResult{Path: filepath.ToSlash(p), Content: string(data), Size: int64(len(data))}
	if n := encodedLen(res); n > protocol.MaxContentBytes {
		return ReadFileResult{}, fail("%s: %s takes %d bytes as JSON text, over the limit of %d bytes", NameReadFile, a.Path, n, protocol.MaxContentBytes)
	}
	return res, nil
}

func (f *files) list(ctx context.Context, _ *tool.RunContext, a ListDirArgs) (ListDirResult, error) {
	if a.Path == "" {
		a.Path = "."
	}
	p, err := f.rel(NameListDir, a.Path)
	if err != nil {
		return ListDirResult{}, err
	}
	if err := f.refused(NameListDir, p, a.Path); err != nil {
		return ListDirResult{}, err
	}
	root, err := f.open(NameListDir)
	if err != nil {
		return ListDirResult{}, err
	}
	defer root.Close()
	dir, err := root.Open(p)
	if err != nil {
		return ListDirResult{}, fsFail(NameListDir, a.Path, err)
	}
	defer dir.Close()
	if err := f.checkOpened(NameListDir, dir, a.Path); err != nil {
		return ListDirResult{}, err
	}
	fi, err := dir.Stat()
	if err != nil {
		return ListDirResult{}, fsFail(NameListDir, a.Path, err)
	}
	if !fi.IsDir() {
		return ListDirResult{}, fail("%s: %s is not a directory", NameListDir, a.Path)
	}
	ents, err := dir.ReadDir(-1)
	if err != nil {
		return ListDirResult{}, fsFail(NameListDir, a.Path, err)
	}
	// File.ReadDir returns directory order; sort for stable output.
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	res := ListDirResult{Path: filepath.ToSlash(p), Entries: []DirEntry{}}
	if len(ents) > MaxDirEntries {
		ents, res.Truncated = ents[:MaxDirEntries], true
	}
	// The listing must fit a result message once JSON-encoded.
	used := encodedLen(ListDirResult{Path: res.Path, Truncated: true})
	for _, e := range ents {
		if ctx.Err() != nil {
			return ListDirResult{}, ctxErr(ctx, NameListDir)
		}
		de := DirEntry{Name: e.Name(), Type: entryType(e.Type())}
		if info, err := e.Info(); err == nil {
			de.Size = info.Size()
		}
		if used += encodedLen(de) + 1; used > protocol.MaxContentBytes {
			res.Truncated = true
			break
		}
		res.Entries = append(res.Entries, de)
	}
	return res, nil
}

func entryType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "dir"
	case m.IsRegular():
		return "file"
	default:
		return "other"
	}
}

func (f *files) write(ctx context.Context, _ *tool.RunContext, a WriteFileArgs) (WriteFileResult, error) {
	p, err := f.rel(NameWriteFile, a.Path)
	if err != nil {
		return WriteFileResult{}, err
	}
	if p == "." {
		return WriteFileResult{}, fail("%s: %s is a directory", NameWriteFile, a.Path)
	}
	if err := f.refused(NameWriteFile, p, a.Path); err != nil {
		return WriteFileResult{}, err
	}
	if len(a.Content) > MaxFileBytes {
		return WriteFileResult{}, fail("%s: content is %d bytes, over the limit of %d bytes", NameWriteFile, len(a.Content), MaxFileBytes)
	}
	root, err := f.open(NameWriteFile)
	if err != nil {
		return WriteFileResult{}, err
	}
	defer root.Close()
	if err := f.mkdirs(root, filepath.Dir(p), a.Path); err != nil {
		return WriteFileResult{}, err
	}
	if err := f.writeIn(root, p, a.Path, []byte(a.Content)); err != nil {
		return WriteFileResult{}, err
	}
	f.log.InfoContext(ctx, "builtin: file written",
		slog.String("path", filepath.ToSlash(p)), slog.Int("bytes", len(a.Content)))
	return WriteFileResult{Path: filepath.ToSlash(p), BytesWritten: len(a.Content)}, nil
}
