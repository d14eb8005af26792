package deploy

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
)

// passwordInArgv matches a --nats flag given a URL with a user and a
// password (or a token: user:password@ or token@).
var passwordInArgv = regexp.MustCompile(`--nats[= ]+["']?[a-z]+://[^\s"'/@]+@`)

// TestDocsKeepPasswordsOutOfArgv (issue 37, finding 7): no document of
// the repository starts a binary with its password in --nats, which every
// local user reads in /proc/<pid>/cmdline (the binaries warn against
// it): credentials go in NATS_URL, NATS_USER and NATS_PASSWORD, or a
// credentials file.
func TestDocsKeepPasswordsOutOfArgv(t *testing.T) {
	t.Parallel()
	n := 0
	root, err := os.OpenRoot("..")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	repo := root.FS()
	err = fs.WalkDir(repo, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "node_modules") {
			return fs.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		data, err := fs.ReadFile(repo, path)
		if err != nil {
			return err
		}
		n++
		for i, line := range strings.Split(string(data), "\n") {
			if m := passwordInArgv.FindString(line); m != "" {
				t.Errorf("%s:%d: a password in --nats (%s…): give it in NATS_URL or NATS_USER/NATS_PASSWORD", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("%d documents read: the walk missed the repository", n)
	}
	for _, bad := range []string{`bin/toolworker --nats "nats://worker_mine:$PW@127.0.0.1:4222"`, `agent run --nats=nats://agent:secret@host:4222`} {
		if !passwordInArgv.MatchString(bad) {
			t.Errorf("%s: not caught", bad)
		}
	}
	if good := `bin/toolworker --nats nats://127.0.0.1:4222 --tools all`; passwordInArgv.MatchString(good) {
		t.Errorf("%s: caught", good)
	}
}
