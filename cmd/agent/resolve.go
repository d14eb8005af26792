package main

import (
	"path/filepath"
	"strings"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// resolveCommands returns the function that lists, for a pending call,
// the commands that resolve it, pasteable as printed (SPEC §6.1): with a
// server that outlives the agent (--nats), nats CLI publications; on the
// embedded default, whose server stops with the agent, agent resume with
// the answer as a flag. Alternatives are prefixed with "# ".
func resolveCommands(f *runFlags, rem *remote, conv string) func(agent.Pending) []string {
	subj := protocol.Subjects{Prefix: f.prefix}
	if rem.embedded {
		resume := []string{"agent", "resume", "--store", absPath(f.store), "--conversation", conv}
		if f.prefix != protocol.DefaultPrefix {
			resume = append(resume, "--prefix", f.prefix)
		}
		cmd := func(extra ...string) string {
			return natsCLIJoin(append(append([]string(nil), resume...), extra...))
		}
		return func(p agent.Pending) []string {
			switch p.Kind {
			case deferred.KindApproval:
				return []string{cmd("--approve-task", p.TaskID), "# " + cmd("--deny-task", p.TaskID+"=why")}
			case deferred.KindExternal:
				return []string{cmd("--result", p.TaskID+`={"content":"..."}`)}
			}
			return nil
		}
	}
	opts := []string{"nats", "--server", natsjs.RedactURL(f.nats)}
	switch {
	case f.conn.context != "":
		opts = []string{"nats", "--context", f.conn.context}
	case f.conn.creds != "":
		opts = append(opts, "--creds", absPath(f.conn.creds))
	case f.conn.nkey != "":
		opts = append(opts, "--nkey", absPath(f.conn.nkey))
	}
	pub := func(subject, data string) string {
		return natsCLIJoin(append(append([]string(nil), opts...), "pub", subject, data))
	}
	return func(p agent.Pending) []string {
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
