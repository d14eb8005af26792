package cmdtool_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/cmdtool"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestToolUser (issue 37): under root, a command runs as Options.ToolUser
// with no capability and HOME its home; Tools fails when the user does
// not exist, cannot enter the working directory or cannot run the
// program; ToolUser root keeps the commands root's.
func TestToolUser(t *testing.T) {
	offloadtest.RequireRoot(t)
	t.Parallel()
	nobody, err := user.Lookup(proc.DefaultToolUser)
	if err != nil {
		t.Fatal(err)
	}
	open, closed := proctest.ToolUserDirs(t)
	const who = `echo "$(id -u) $(id -g) $HOME $(grep CapEff /proc/self/status | tr -d '\t')"`
	for _, d := range []string{open, closed} {
		script(t, d, "who.sh", who)
	}
	const yamlText = "tools:\n  - {name: who, command: [./who.sh]}\n"
	cfg, err := cmdtool.Parse([]byte(yamlText))
	if err != nil {
		t.Fatal(err)
	}
	run := func(opts cmdtool.Options) string {
		t.Helper()
		tools, err := cfg.Tools(opts)
		if err != nil {
			t.Fatal(err)
		}
		out, err := tools[0].Run(t.Context(), &tool.RunContext{}, json.RawMessage(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		return out.(string)
	}
	if got, want := run(cmdtool.Options{Dir: open, ToolUser: "nobody", Getenv: func(k string) string {
		if k == "HOME" {
			return "/root"
		}
		return os.Getenv(k)
	}}),
		nobody.Uid+" "+nobody.Gid+" "+nobody.HomeDir+" CapEff:0000000000000000"; got != want {
		t.Errorf("as nobody: %q, want %q", got, want)
	}
	if got := run(cmdtool.Options{Dir: closed, ToolUser: "root"}); !strings.HasPrefix(got, "0 0 ") {
		t.Errorf("as root: %q", got)
	}
	for _, tc := range []struct {
		opts cmdtool.Options
		want error
	}{
		{cmdtool.Options{Dir: open, ToolUser: "no-such-user-37"}, proc.ErrNoSuchUser},
		{cmdtool.Options{Dir: closed, ToolUser: "nobody"}, proc.ErrNoAccess},
	} {
		if _, err := cfg.Tools(tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.opts, err, tc.want)
		}
	}
	if err := os.Chmod(filepath.Join(open, "who.sh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Tools(cmdtool.Options{Dir: open, ToolUser: "nobody"}); !errors.Is(err, proc.ErrNoAccess) || !strings.Contains(err.Error(), "cannot run") {
		t.Errorf("a program nobody cannot run: %v", err)
	}
}
