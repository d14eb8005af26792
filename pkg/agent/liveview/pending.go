package liveview

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// WritePending writes one line per pending call, "<task> <kind> <tool>
// <args JSON>" (SPEC §6.1), with " (non-blocking)" after it for a
// non-blocking call (§12), then, when commands is set, the commands that
// resolve it, one per line.
func WritePending(w io.Writer, pending []deferred.PendingTask, commands func(deferred.PendingTask) []string) {
	for _, p := range pending {
		mark := ""
		if p.NonBlocking {
			mark = " (non-blocking)"
		}
		fmt.Fprintf(w, "%s %s %s %s%s\n", p.TaskID, p.Kind, p.Tool, compact(p.Args), mark)
		writeAsks(w, p.Metadata)
		if commands != nil {
			for _, c := range commands(p) {
				fmt.Fprintln(w, c)
			}
		}
	}
}

// writeAsks writes what an MCP server's elicitation asks a person (SPEC
// §16: metadata mcp.elicitation, mcp.url), indented: "asks: <message>", then the
// URL to open or the fields of the requested schema ("*" marks a required
// one), which the answer's content gives.
func writeAsks(w io.Writer, md map[string]any) {
	e, ok := md["mcp.elicitation"].(map[string]any)
	if !ok {
		return
	}
	msg, _ := e["message"].(string)
	fmt.Fprintf(w, "  asks: %s\n", oneLine(msg))
	if url, _ := md["mcp.url"].(string); url != "" {
		fmt.Fprintf(w, "  open: %s\n", oneLine(url))
		return
	}
	schema, _ := e["requestedSchema"].(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	if len(props) == 0 {
		return
	}
	required := map[string]bool{}
	if rs, ok := schema["required"].([]any); ok {
		for _, r := range rs {
			if n, ok := r.(string); ok {
				required[n] = true
			}
		}
	}
	names := make([]string, 0, len(props))
	for n := range props {
		if required[n] {
			n += "*"
		}
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(w, "  fields of the answer's content: %s\n", oneLine(strings.Join(names, ", ")))
}

// oneLine keeps a server's text on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// WritePauseSummary says that the run paused, what it waits for, how to
// answer it and, when resume is set, how to continue (SPEC §6.2).
func WritePauseSummary(w io.Writer, pending []deferred.PendingTask, resume string) {
	var waiting, background int
	for _, p := range pending {
		if p.Background() {
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

// Commands builds the shell commands that answer and continue a paused
// conversation, pasteable as printed (SPEC §6.1): with a server that
// outlives the agent, nats CLI publications; on the embedded default,
// whose server stops with the agent, the agent's approve, deny and answer
// commands, which start the store's server themselves. The commands give
// paths as absolute ones.
type Commands struct {
	// Agent is how the commands name the agent program. Defaults to
	// "agent" when that is what PATH finds (or the program is go run's,
	// gone once it exits), else the program's absolute path.
	Agent string
	// Embedded is set on the embedded default; Store is its store.
	Embedded bool
	Store    string
	// Prefix is the subject prefix.
	Prefix string
	// Server is the (redacted) server URL list, or Context the nats CLI
	// context; Creds and Nkey the credentials files.
	Server, Context, Creds, Nkey string
	// Spec is the agent's spec file, if any: its external tools and
	// instructions are not stored, so a resume needs it again.
	Spec string
}

// Resolve returns the commands that resolve pending call p of
// conversation conv; alternatives are prefixed with "# ". A background
// task has none.
func (c Commands) Resolve(conv string, p deferred.PendingTask) []string {
	c = c.absolute()
	if c.Embedded {
		cmd := func(verb string, extra ...string) string {
			args := []string{c.Agent, verb, "--store", c.Store, "--conversation", conv}
			if c.Prefix != protocol.DefaultPrefix {
				args = append(args, "--prefix", c.Prefix)
			}
			return ShellJoin(append(args, extra...))
		}
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
	opts := []string{"nats", "--server", c.Server}
	switch {
	case c.Context != "":
		opts = []string{"nats", "--context", c.Context}
	case c.Creds != "":
		opts = append(opts, "--creds", c.Creds)
	case c.Nkey != "":
		opts = append(opts, "--nkey", c.Nkey)
	}
	pub := func(subject, data string) string {
		return ShellJoin(append(append([]string(nil), opts...), "pub", subject, data))
	}
	subj := protocol.Subjects{Prefix: c.Prefix}
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

// Resume returns the command that continues conversation conv once its
// pending calls are answered.
func (c Commands) Resume(conv string) string {
	c = c.absolute()
	args := []string{c.Agent, "resume"}
	switch {
	case c.Embedded:
		args = append(args, "--store", c.Store)
	case c.Context != "":
		args = append(args, "--context", c.Context)
	default:
		args = append(args, "--nats", c.Server)
		if c.Creds != "" {
			args = append(args, "--creds", c.Creds)
		}
		if c.Nkey != "" {
			args = append(args, "--nkey", c.Nkey)
		}
	}
	if c.Prefix != protocol.DefaultPrefix {
		args = append(args, "--prefix", c.Prefix)
	}
	if c.Spec != "" {
		args = append(args, "--spec", c.Spec)
	}
	return ShellJoin(append(args, "--conversation", conv))
}

// absolute returns c with its paths made absolute and its agent command
// set.
func (c Commands) absolute() Commands {
	for _, p := range []*string{&c.Store, &c.Creds, &c.Nkey, &c.Spec} {
		if *p != "" {
			*p = absPath(*p)
		}
	}
	if c.Agent == "" {
		c.Agent = agentCommand()
	}
	return c
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

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// ShellJoin shell-quotes a command line (see [ShellQuote]).
func ShellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = ShellQuote(a)
	}
	return strings.Join(q, " ")
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Ask returns the decision of a person at a terminal on an approval: it
// asks on out, "approve TOOL ARGS? [y/N, or a reason to deny]", and reads
// the answer from in: y or yes approves, an empty line, n or no denies,
// anything else denies with that reason.
func Ask(in io.Reader, out io.Writer) func(message.ToolCall) any {
	r := bufio.NewReader(in)
	return func(c message.ToolCall) any {
		fmt.Fprintf(out, "approve %s %s? [y/N, or a reason to deny] ", c.ToolName, c.ArgsJSON())
		line, _ := r.ReadString('\n')
		line = strings.TrimSpace(line)
		switch strings.ToLower(line) {
		case "y", "yes":
			return true
		case "", "n", "no":
			return false
		}
		return deferred.ToolDenied{Message: line}
	}
}

// WriteQueued writes one line per call held in its tool's queue by a
// limit (SPEC §19), after the pending calls: "<task> queued <tool>
// (<reason>[, tenant T], since HH:MM:SS) in conversation <id>"; nothing
// resolves it, so no command follows.
func WriteQueued(w io.Writer, queued []pending.Queued) {
	for _, q := range queued {
		tenant := ""
		if q.Tenant != "" {
			tenant = ", tenant " + q.Tenant
		}
		fmt.Fprintf(w, "%s queued %s (%s%s, since %s) in conversation %s\n", q.TaskID, q.Tool, cmp.Or(q.Reason, "waiting"), tenant,
			q.Since.UTC().Format(time.TimeOnly), q.ConversationID)
	}
}
