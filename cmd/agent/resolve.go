package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// resolveCommands returns the function that lists, for a pending call,
// the commands that resolve it, pasteable as printed (SPEC §6.1): with a
// server that outlives the agent (--nats), nats CLI publications; on the
// embedded default, whose server stops with the agent, agent approve,
// deny and answer, which start the store's server themselves.
// Alternatives are prefixed with "# ".
func resolveCommands(f *runFlags, embedded bool, conv string) func(deferred.PendingTask) []string {
	subj := protocol.Subjects{Prefix: f.prefix}
	if embedded {
		base := func(verb string) []string {
			c := []string{agentCommand(), verb, "--store", absPath(f.store), "--conversation", conv}
			if f.prefix != protocol.DefaultPrefix {
				c = append(c, "--prefix", f.prefix)
			}
			return c
		}
		cmd := func(verb string, extra ...string) string {
			return natsCLIJoin(append(base(verb), extra...))
		}
		return func(p deferred.PendingTask) []string {
			switch p.Kind {
			case deferred.KindApproval:
				return []string{cmd("approve", p.TaskID),
					"# " + cmd("deny", p.TaskID, "--message", "why"),
					"# " + cmd("approve", p.TaskID, "--args", compact(p.Args))}
			case deferred.KindExternal:
				return []string{cmd("answer", p.TaskID, `{"content":"..."}`)}
			}
			return nil
		}
	}
	opts := []string{"nats", "--server", natsjs.RedactURL(f.conn.URL)}
	switch {
	case f.conn.Context != "":
		opts = []string{"nats", "--context", f.conn.Context}
	case f.conn.Creds != "":
		opts = append(opts, "--creds", absPath(f.conn.Creds))
	case f.conn.Nkey != "":
		opts = append(opts, "--nkey", absPath(f.conn.Nkey))
	}
	pub := func(subject, data string) string {
		return natsCLIJoin(append(append([]string(nil), opts...), "pub", subject, data))
	}
	return func(p deferred.PendingTask) []string {
		switch p.Kind {
		case deferred.KindApproval:
			s := subj.Decision(conv, p.TaskID)
			return []string{pub(s, `{"approved":true}`),
				"# " + pub(s, `{"approved":false,"message":"why"}`),
				"# " + pub(s, `{"approved":true,"override_args":`+compact(p.Args)+`}`)}
		case deferred.KindExternal:
			return []string{pub(subj.Answer(conv, p.TaskID), `{"content":"..."}`)}
		}
		return nil
	}
}

// agentCommand is how the printed commands name this program: "agent"
// when that is what PATH finds (or the binary is go run's, which is gone
// once it exits), else its absolute path.
func agentCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "agent"
	}
	if p, err := exec.LookPath("agent"); err == nil {
		if a, b := absPath(p), absPath(exe); a == b {
			return "agent"
		}
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "agent"
	}
	return exe
}

// natsCLIJoin shell-quotes a command line.
func natsCLIJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// resumeHint returns the command that continues the conversation once its
// pending calls are answered.
func resumeHint(f *runFlags, embedded bool, conv string) string {
	c := []string{agentCommand(), "resume"}
	if embedded {
		c = append(c, "--store", absPath(f.store))
	} else {
		switch {
		case f.conn.Context != "":
			c = append(c, "--context", f.conn.Context)
		default:
			c = append(c, "--nats", natsjs.RedactURL(f.conn.URL))
			if f.conn.Creds != "" {
				c = append(c, "--creds", absPath(f.conn.Creds))
			}
			if f.conn.Nkey != "" {
				c = append(c, "--nkey", absPath(f.conn.Nkey))
			}
		}
	}
	if f.prefix != protocol.DefaultPrefix {
		c = append(c, "--prefix", f.prefix)
	}
	if f.spec != "" {
		// Its external tools and instructions are not stored.
		c = append(c, "--spec", absPath(f.spec))
	}
	return natsCLIJoin(append(c, "--conversation", conv))
}

// writePauseSummary says on stderr that the run paused, what it waits for,
// how to answer it and how to continue (SPEC §6.2).
func writePauseSummary(w io.Writer, pending []deferred.PendingTask, resume string) {
	var waiting, background int
	for _, p := range pending {
		if p.Kind == deferred.KindBackground {
			background++
		} else {
			waiting++
		}
	}
	fmt.Fprintf(w, "paused: the conversation waits for %s", plural(waiting, "answer"))
	if background > 0 {
		fmt.Fprintf(w, " and %s still running", plural(background, "background task"))
	}
	fmt.Fprintln(w, " (listed on stdout).")
	if waiting > 0 {
		fmt.Fprintln(w, "  answer each call with one of the commands printed under it (lines starting with # are alternatives),")
	}
	if resume != "" {
		fmt.Fprintf(w, "  then continue with: %s\n", resume)
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
