package builtin_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/builtin"
)

// raceRounds is how many calls of each file tool race the link flipper:
// before the fix, 8–11 % of them reached the store.
const raceRounds = 600

// TestFileToolsSymlinkRace (issue 30, finding 8): a process flips a link in
// the root between a harmless directory and the store while read_file,
// list_dir and write_file go through it; no call ever reads, lists or
// writes the store (each either works on the decoy or is refused).
func TestFileToolsSymlinkRace(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	store := filepath.Join(root, ".offload")
	decoy := filepath.Join(root, "decoy")
	for d, content := range map[string]string{store: "SUA-secret", decoy: "decoy"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "nkey.seed"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(store, "only-in-store"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	flip := filepath.Join(root, "flip")
	if err := os.Symlink("decoy", flip); err != nil {
		t.Fatal(err)
	}
	tools := toolsFor(t, builtin.Config{Root: root, DenyPaths: []string{store}})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tmp := filepath.Join(root, "flip.tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			target := "decoy"
			if i%2 == 0 {
				target = ".offload"
			}
			_ = os.Remove(tmp)
			if os.Symlink(target, tmp) == nil {
				_ = os.Rename(tmp, flip)
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	escaped := map[string]int{}
	for range raceRounds {
		if out, err := call(t.Context(), t, tools["read_file"], `{"path":"flip/nkey.seed"}`); err == nil &&
			out.(builtin.ReadFileResult).Content == "SUA-secret" {
			escaped["read_file"]++
		}
		if out, err := call(t.Context(), t, tools["list_dir"], `{"path":"flip"}`); err == nil {
			for _, e := range out.(builtin.ListDirResult).Entries {
				if e.Name == "only-in-store" {
					escaped["list_dir"]++
				}
			}
		}
		_, _ = call(t.Context(), t, tools["write_file"], `{"path":"flip/nkey.seed","content":"pwned"}`)
		_, _ = call(t.Context(), t, tools["write_file"], `{"path":"flip/made/new","content":"pwned"}`)
		if b, _ := os.ReadFile(filepath.Join(store, "nkey.seed")); string(b) != "SUA-secret" {
			escaped["write_file"]++
			_ = os.WriteFile(filepath.Join(store, "nkey.seed"), []byte("SUA-secret"), 0o600)
		}
		if ents, _ := os.ReadDir(store); len(ents) != 2 {
			t.Fatalf("the store holds %d entries, want 2", len(ents))
		}
	}
	for tool, n := range escaped {
		t.Errorf("%s reached the store in %d of %d calls", tool, n, raceRounds)
	}
	if len(escaped) == 0 {
		t.Logf("no call of %d per tool reached the store", raceRounds)
	}
}
