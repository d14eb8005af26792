package builtin_test

import (
	"errors"
	"os/user"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/builtin"
)

// TestShellToolUser (issue 37): under root, shell runs as
// Config.ToolUser with no capability; Named and Offered fail when that
// user cannot enter the root and shell is among the tools, and not
// otherwise; an unknown user fails Tools.
func TestShellToolUser(t *testing.T) {
	offloadtest.RequireRoot(t)
	t.Parallel()
	nobody, err := user.Lookup(proc.DefaultToolUser)
	if err != nil {
		t.Fatal(err)
	}
	open, closed := proctest.ToolUserDirs(t)
	cfg := builtin.Config{Root: open, ToolUser: "nobody"}
	sh := toolsFor(t, cfg)["shell"]
	out, err := call(t.Context(), t, sh, `{"command":"echo $(id -u) $(id -g) $(grep CapEff /proc/self/status | tr -d '\\t')"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.(builtin.ShellResult).Stdout), nobody.Uid+" "+nobody.Gid+" CapEff:0000000000000000"; got != want {
		t.Errorf("shell as the tool user: %q, want %q", got, want)
	}

	cfg.Root = closed
	if _, err := builtin.Named(cfg, []string{"shell"}); !errors.Is(err, proc.ErrNoAccess) || !strings.Contains(err.Error(), closed) {
		t.Errorf("Named shell, a root nobody cannot enter: %v", err)
	}
	if _, err := builtin.Offered(cfg, []string{"read_file", "shell"}); !errors.Is(err, proc.ErrNoAccess) {
		t.Errorf("Offered shell, a root nobody cannot enter: %v", err)
	}
	if _, err := builtin.Offered(cfg, nil); err != nil { // shell not offered
		t.Errorf("Offered without shell: %v", err)
	}
	if _, err := builtin.Named(cfg, []string{"read_file"}); err != nil {
		t.Errorf("Named without shell: %v", err)
	}
	cfg.ToolUser = "root"
	if _, err := builtin.Named(cfg, []string{"shell"}); err != nil {
		t.Errorf("shell as root: %v", err)
	}
	cfg.ToolUser = "no-such-user-37"
	if _, err := builtin.Tools(cfg); !errors.Is(err, proc.ErrNoSuchUser) {
		t.Errorf("an unknown tool user: %v", err)
	}
}
