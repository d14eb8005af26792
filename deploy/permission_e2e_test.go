package deploy

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/proctest"
)

// refusalWithin bounds how long a binary may take to say what the server
// refused (the were 5 s and 30 s of silence, then a timeout).
const refusalWithin = 5 * time.Second

// TestPermissionErrorsNameTheFix runs both binaries with the credentials of
// every role of auth.conf that cannot do their work (and without the
// role's inbox prefix): each exits 1 within 5 s with an error naming the
// user, the refused subject and the fix (the --inbox-prefix to use, or the
// role the program needs), not a timeout.
func TestPermissionErrorsNameTheFix(t *testing.T) {
	t.Parallel()
	agentBin, workerBin := binaries(t)
	d := startDeployServer(t)
	bare := startBareDeployServer(t)
	run := []string{"run", "--model", "test", "--tools", "sleep", "nap"}
	serve := []string{"--tools", "sleep", "--id", "perm-test"}
	for _, c := range []struct {
		name, bin, role, inbox string
		server                 *deployServer
		args                   []string
		want                   []string
	}{
		{"agent run without its inbox prefix", agentBin, "agent", "", d, run,
			[]string{`user "agent" subscribe to "_INBOX.`, "--inbox-prefix _INBOX_agent"}},
		{"agent run with the worker's inbox prefix", agentBin, "agent", "_INBOX_worker", d, run,
			[]string{`user "agent" subscribe to "_INBOX_worker.`, "--inbox-prefix _INBOX_agent"}},
		{"agent run as worker", agentBin, "worker", "_INBOX_worker", d, run,
			[]string{`user "worker" publish to "$JS.API.CONSUMER.CREATE.TOOLS_RESULTS.`, "needs the agent role"}},
		{"agent run as approver", agentBin, "approver", "_INBOX_approver", d, run,
			[]string{`user "approver" publish to "$JS.API.STREAM.INFO.KV_tools_conversations"`, "needs the agent role"}},
		{"agent run as answerer", agentBin, "answerer", "_INBOX_answerer", d, run,
			[]string{`user "answerer" publish to "$JS.API.STREAM.INFO.KV_tools_conversations"`, "needs the agent role"}},
		{"agent provision as agent", agentBin, "agent", "_INBOX_agent", bare, []string{"provision"},
			[]string{"is missing and this user may not create it", `user "agent" publish to "$JS.API.STREAM.CREATE.KV_tools_conversations"`, "needs the admin role"}},
		{"toolworker without its inbox prefix", workerBin, "worker", "", d, serve,
			[]string{`user \"worker\" subscribe to \"_INBOX.`, "--inbox-prefix _INBOX_worker"}},
		{"toolworker as agent", workerBin, "agent", "_INBOX_agent", d, serve,
			[]string{`user \"agent\" publish to \"$JS.API.CONSUMER.INFO.TOOLS_TASKS.task_sleep\"`, "needs the worker role"}},
		{"toolworker as approver", workerBin, "approver", "_INBOX_approver", d, serve,
			[]string{`user \"approver\" publish to \"$JS.API.STREAM.INFO.KV_tools_conversations\"`, "needs the worker role"}},
		{"toolworker as answerer", workerBin, "answerer", "_INBOX_answerer", d, serve,
			[]string{`user \"answerer\" publish to \"$JS.API.STREAM.INFO.KV_tools_conversations\"`, "needs the worker role"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string(nil), c.args...), "--nats", c.server.roleURL(c.role))
			if c.inbox != "" {
				args = append(args, "--inbox-prefix", c.inbox)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, c.bin, args...)
			cmd.Dir = t.TempDir()
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			var ee *exec.ExitError
			errors.As(err, &ee)
			if ee == nil || ee.ExitCode() != 1 {
				t.Fatalf("exit: %v, want 1 (after %s)\n%s", err, took, out.String())
			}
			// The last line is the error the program ends with.
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			last := lines[len(lines)-1]
			if c.bin == workerBin {
				last = lines[lineWith(lines, `"msg":"toolworker failed"`)]
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("error lacks %q:\n%s", w, last)
				}
			}
			if strings.Contains(last, "context deadline exceeded") || strings.Contains(last, "natsjs: dispatcher: natsjs:") || strings.Contains(last, "natsjs: worker: natsjs:") {
				t.Errorf("a timeout or a repeated prefix:\n%s", last)
			}
			if took > refusalWithin {
				t.Errorf("took %s, want the refusal named within %s", took, refusalWithin)
			}
			t.Logf("%s after %s", last, took.Round(time.Millisecond))
		})
	}

	// The admin may do all of it, with the default inbox prefix.
	t.Run("admin", func(t *testing.T) {
		w := proctest.StartProcess(t, workerBin, "--nats", d.roleURL("admin"), "--tools", "sleep", "--id", "perm-admin")
		w.WaitLog(t, `"msg":"toolworker started"`, 30*time.Second)
		cmd := exec.CommandContext(t.Context(), agentBin, append(append([]string(nil), run...), "--nats", d.roleURL("admin"))...)
		cmd.Dir = t.TempDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("agent run as admin: %v\n%s", err, out)
		}
	})
}

// lineWith returns the index of the first line containing substr, else the
// last line's.
func lineWith(lines []string, substr string) int {
	for i, l := range lines {
		if strings.Contains(l, substr) {
			return i
		}
	}
	return len(lines) - 1
}
