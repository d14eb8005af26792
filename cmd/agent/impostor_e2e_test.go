package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/offload-dev/offload/pkg/embedded"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// TestImpostorAfterSIGKILLRefused replays finding 1 of issue 30 with the
// agent binary: a first `agent run` owns the store's server and a second
// one joins it (SPEC §6.4); the first is killed with SIGKILL, and another
// local user's relay, presenting the recorded server ID, listens on the
// recorded port in front of a server of its own (where it could publish an
// approved shell task). The next `agent run` on the store does not connect
// to it: it starts a server of its own and finishes its run.
func TestImpostorAfterSIGKILLRefused(t *testing.T) {
	t.Parallel()
	bin := agentBinary(t)
	dir := t.TempDir()
	long := sleepScript(t, dir, 120)
	short := writeFile(t, dir, "short.yaml", "turns:\n  - text: done\n")
	run := func(script, name string) *piped {
		cmd := exec.CommandContext(t.Context(), bin, "run", "--json", "--model", "script:"+script, "--tools", "sleep", name)
		cmd.Dir = dir // one store: ./.offload
		p := startPiped(t, cmd)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return p
	}
	waitCall := func(p *piped) {
		t.Helper()
		for p.stdout.Scan() {
			var ev map[string]any
			if json.Unmarshal(p.stdout.Bytes(), &ev) == nil && ev["type"] == "tool_call" {
				return
			}
		}
		t.Fatalf("no tool_call event; stderr: %s", p.stderr.String())
	}
	store := filepath.Join(dir, ".offload")
	recorded := func(name string) string {
		b, err := os.ReadFile(filepath.Join(store, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	natsLine := func(p *piped) string {
		for l := range strings.Lines(p.stderr.String()) {
			if u, ok := strings.CutPrefix(strings.TrimSpace(l), "nats: "); ok {
				return u
			}
		}
		return ""
	}

	first := run(long, "first")
	waitCall(first)
	url, id := recorded(embedded.URLFile), recorded(embedded.ServerIDFile)

	// A second agent on the live store joins the first's server.
	second := run(short, "second")
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("second agent: %v\nstderr: %s", err, second.stderr.String())
	}
	if got := natsLine(second); got != url {
		t.Fatalf("second agent used %q, want the first's %q\nstderr: %s", got, url, second.stderr.String())
	}

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	theirs := natstest.Start(t)
	im := natstest.NewImpostor(t, strings.TrimPrefix(url, "nats://"), theirs.URL(), id)

	third := run(short, "third")
	if err := third.cmd.Wait(); err != nil {
		t.Fatalf("third agent: %v\nstderr: %s", err, third.stderr.String())
	}
	if got := natsLine(third); got == "" || got == url {
		t.Errorf("third agent used %q, the impostor's address %q\nstderr: %s", got, url, third.stderr.String())
	}
	if n := im.Connected(); n != 0 {
		t.Errorf("%d clients connected to the impostor", n)
	}
}
