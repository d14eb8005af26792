package main

import (
	"context"
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// rootSnoopScript is what the tools of TestToolsUnderRootWorker run: it
// tries to read its worker's environment and memory, says who it is and
// what privileges it holds, and does a tool's ordinary work (writes a file
// in its working directory and reads it back). Each line is "key: value".
const rootSnoopScript = `#!/bin/sh
echo "environ: $(cat /proc/$PPID/environ 2>&1 | tr '\0' ' ')"
if (exec 3</proc/$PPID/mem) 2>/dev/null; then echo "mem: opened"; else echo "mem: denied"; fi
echo "maps: $(head -c 300 /proc/$PPID/maps 2>&1 | tr '\n' ' ')"
echo "id: $(id)"
echo "home: $HOME"
grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status | sed 's/:[[:space:]]*/: /'
echo "$OFFLOAD_TASK_ID" > "wrote-$OFFLOAD_TASK_ID" && echo "wrote: $(cat "wrote-$OFFLOAD_TASK_ID")"
`

const rootSnoopConfig = `tools:
  - name: snoop_root
    description: Read the worker's environment and memory; say who runs.
    command: ["./snoop.sh"]
    parameters: {type: object, properties: {}}
  - name: detach
    description: Leave a detached sleep behind and exit.
    command: ["./detach.sh", "0"]
    parameters: {type: object, properties: {}}
  - name: detach_hold
    description: Leave a detached sleep behind and run on.
    command: ["./detach.sh", "600"]
    timeout: 2s
    parameters: {type: object, properties: {}}
`

// TestToolsUnderRootWorker (issue 37): a worker run as root (the common
// case in containers) with a NATS password and an API key in its
// environment runs its command tools, and the built-in shell, as the tool
// user (default nobody) with every capability dropped: neither reads the
// worker's /proc/$PPID/environ, mem or maps, both run as nobody with
// empty capability sets and no_new_privs, and both still do their work in
// their directory (owned by nobody). Before, they ran as root and read
// both secrets from /proc/$PPID/environ. The process group kill and the
// subreaper still end what a command of the tool user detached, when it
// exits and when it times out.
func TestToolsUnderRootWorker(t *testing.T) {
	offloadtest.RequireRoot(t)
	t.Parallel()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("the default tool user: %v", err)
	}
	bin, _ := binaries(t)
	srv := natstest.Start(t)
	dir := secretWorkerDir(t, bin, map[string]string{"snoop.sh": rootSnoopScript, "detach.sh": detachScript, "tools.yaml": rootSnoopConfig})
	uid, err := strconv.Atoi(nobody.Uid)
	if err != nil {
		t.Fatal(err)
	}
	gid, err := strconv.Atoi(nobody.Gid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil { // the tool user's directory: its tools write there
		t.Fatal(err)
	}
	// The worker runs as root: as the test does (no credential).
	startSecretWorker(t, dir, srv.URL(), nil, "--config", filepath.Join(dir, "tools.yaml"), "--tools", "snoop_root,detach,detach_hold,shell", "--root", dir)

	ctx := context.Background()
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: srv.Conn(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })

	for _, tc := range []struct {
		tool, args string
	}{
		{"snoop_root", `{}`},
		// Sourced, so that $PPID is the worker (shell's /bin/sh -c).
		{"shell", `{"command": ". ./snoop.sh"}`},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			tk := protocol.Task{TaskID: protocol.NewID(), Tool: tc.tool, Args: json.RawMessage(tc.args), ConversationID: protocol.NewID(), Approved: true}
			res, err := d.Call(ctx, tk)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != protocol.StatusOK {
				t.Fatalf("%s: %+v", tc.tool, res)
			}
			out := string(res.Content)
			if tc.tool == "shell" {
				var sr struct {
					Stdout, Stderr string
					ExitCode       int `json:"exit_code"`
				}
				if err := json.Unmarshal(res.Content, &sr); err != nil {
					t.Fatal(err)
				}
				out = sr.Stdout + sr.Stderr
			} else if err := json.Unmarshal(res.Content, &out); err != nil {
				t.Fatal(err)
			}
			for _, secret := range []string{workerPassword, workerAPIKey} {
				if strings.Contains(out, secret) {
					t.Errorf("the tool read %q from its worker:\n%s", secret, out)
				}
			}
			got := map[string]string{}
			for line := range strings.SplitSeq(out, "\n") {
				if k, v, ok := strings.Cut(line, ": "); ok {
					got[k] = strings.TrimSpace(v)
				}
			}
			want := map[string]func(string) bool{
				"environ": func(v string) bool { return strings.Contains(v, "Permission denied") },
				"mem":     func(v string) bool { return v == "denied" },
				"maps":    func(v string) bool { return strings.Contains(v, "Permission denied") },
				"id": func(v string) bool {
					return v == "uid="+nobody.Uid+"(nobody) gid="+nobody.Gid+"("+groupName(t, nobody.Gid)+") groups="+nobody.Gid+"("+groupName(t, nobody.Gid)+")"
				},
				"home":       func(v string) bool { return v == nobody.HomeDir },
				"CapInh":     func(v string) bool { return v == "0000000000000000" },
				"CapPrm":     func(v string) bool { return v == "0000000000000000" },
				"CapEff":     func(v string) bool { return v == "0000000000000000" },
				"CapBnd":     func(v string) bool { return v == "0000000000000000" },
				"CapAmb":     func(v string) bool { return v == "0000000000000000" },
				"NoNewPrivs": func(v string) bool { return v == "1" },
				"wrote":      func(v string) bool { return v == tk.TaskID },
			}
			for k, ok := range want {
				if v, found := got[k]; !found || !ok(v) {
					t.Errorf("%s: %q (found %v)", k, v, found)
				}
			}
			fi, err := os.Stat(filepath.Join(dir, "wrote-"+tk.TaskID))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
				t.Errorf("the file the tool wrote is uid %d's, want the tool user's (%d)", st.Uid, uid)
			}
			if t.Failed() {
				t.Logf("the tool's output:\n%s", out)
			}
		})
	}

	t.Run("detached, exit", func(t *testing.T) {
		tk := protocol.Task{TaskID: protocol.NewID(), Tool: "detach", Args: json.RawMessage(`{}`), ConversationID: protocol.NewID()}
		res, err := d.Call(ctx, tk)
		if err != nil || res.Status != protocol.StatusOK {
			t.Fatalf("detach: %+v, %v", res, err)
		}
		detachedGone(t, dir, tk)
	})
	t.Run("detached, timeout", func(t *testing.T) {
		tk := protocol.Task{TaskID: protocol.NewID(), Tool: "detach_hold", Args: json.RawMessage(`{}`), ConversationID: protocol.NewID()}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := d.Call(wctx, tk)
		if err != nil || res.ErrorType != protocol.ErrorDeadlineExceeded {
			t.Fatalf("detach_hold past its timeout: %+v, %v", res, err)
		}
		detachedGone(t, dir, tk)
	})
}

// groupName returns the name of group gid.
func groupName(t *testing.T, gid string) string {
	t.Helper()
	g, err := user.LookupGroupId(gid)
	if err != nil {
		t.Fatal(err)
	}
	return g.Name
}
