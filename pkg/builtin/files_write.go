package builtin

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxWriteLinks bounds the symbolic links write_file follows at the last
// component of its path.
const maxWriteLinks = 8

// writeIn writes data to the root-relative path p (shown as shown) without
// a check-then-open race: the parent directory is opened through the root
// (os.Root: no escape), checked as opened ([files.checkOpened]), and the
// file is created in it by descriptor with O_NOFOLLOW, so that no link
// swapped in between is followed. A symbolic link at the last component is
// read and its target written the same way (within the root, at most
// maxWriteLinks deep).
func (f *files) writeIn(root *os.Root, p, shown string, data []byte) error {
	for range maxWriteLinks {
		dir, base := filepath.Dir(p), filepath.Base(p)
		parent, err := root.Open(dir)
		if err != nil {
			return fsFail(NameWriteFile, shown, err)
		}
		target, err := f.writeAt(parent, base, shown, data)
		_ = parent.Close()
		if err != nil || target == "" {
			return err
		}
		// base is a symbolic link to target: write that instead.
		next := target
		if !filepath.IsAbs(next) {
			next = filepath.Join(f.root, dir, next)
		}
		if p, err = f.rel(NameWriteFile, next); err != nil {
			return err
		}
		if p == "." {
			return fail("%s: %s is a directory", NameWriteFile, shown)
		}
		if err := f.refused(NameWriteFile, p, shown); err != nil {
			return err
		}
	}
	return fail("%s: %s: too many levels of symbolic links", NameWriteFile, shown)
}

// mkdirs creates the missing directories of the root-relative dir, each in
// its parent opened through the root and checked as opened
// ([files.checkOpened]), so that no directory is made in a denied path
// whatever links are swapped meanwhile.
func (f *files) mkdirs(root *os.Root, dir, shown string) error {
	if dir == "." {
		return nil
	}
	parentDir := filepath.Dir(dir)
	if err := f.mkdirs(root, parentDir, shown); err != nil {
		return err
	}
	parent, err := root.Open(parentDir)
	if err != nil {
		return fsFail(NameWriteFile, shown, err)
	}
	defer parent.Close()
	if err := f.checkOpened(NameWriteFile, parent, shown); err != nil {
		return err
	}
	err = unix.Mkdirat(int(parent.Fd()), filepath.Base(dir), 0o755)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fsFail(NameWriteFile, shown, &os.PathError{Op: "mkdir", Path: shown, Err: err})
	}
	return nil
}

// writeAt writes data to base in the open directory parent, or returns the
// target of the symbolic link base is.
func (f *files) writeAt(parent *os.File, base, shown string, data []byte) (link string, err error) {
	if err := f.checkOpened(NameWriteFile, parent, shown); err != nil {
		return "", err
	}
	pfd := int(parent.Fd())
	// Non-blocking: a FIFO must not wait for a reader (ENXIO instead).
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.ELOOP) {
		buf := make([]byte, 4096)
		n, rerr := unix.Readlinkat(pfd, base, buf)
		if rerr != nil {
			return "", fsFail(NameWriteFile, shown, rerr)
		}
		return string(buf[:n]), nil
	}
	if err != nil {
		return "", fsFail(NameWriteFile, shown, &os.PathError{Op: "open", Path: shown, Err: err})
	}
	file := os.NewFile(uintptr(fd), shown)
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return "", fsFail(NameWriteFile, shown, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fail("%s: %s is not a regular file", NameWriteFile, shown)
	}
	if err := file.Truncate(0); err != nil {
		return "", fsFail(NameWriteFile, shown, err)
	}
	if _, err := file.Write(data); err != nil {
		return "", fsFail(NameWriteFile, shown, err)
	}
	return "", nil
}
