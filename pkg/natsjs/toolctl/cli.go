package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
)

// ErrUsage is wrapped by the errors of [CLI.Run] about its command line.
var ErrUsage = errors.New("usage")

// CLIUse and CLIShort are the usage line and summary of `agent tools`.
const (
	CLIUse   = "tools [list | pause TOOL | resume TOOL | dead [TOOL] | replay TOOL SEQ | discard TOOL SEQ | cancel TOOL]"
	CLIShort = "The operator's hands on the fleet's tools: list, pause, resume, dead letters, cancel (SPEC §19)"
)

// CLI is `agent tools` (SPEC §19) but for its connection: its flags and
// what each subcommand does and prints. cmd/agent registers the flags,
// connects and calls Run.
type CLI struct {
	by        string
	until     time.Duration
	agent     string
	tenant    string
	olderThan time.Duration
	json      bool
}

// Register adds the flags of `agent tools` to fs; defaultBy is who takes
// an action unless --by says (the user's login name).
func (c *CLI) Register(fs *pflag.FlagSet, defaultBy string) {
	fs.StringVar(&c.by, "by", defaultBy, "who takes the action, as audited")
	fs.DurationVar(&c.until, "for", 0, "pause: for how long (default: until resumed)")
	fs.StringVar(&c.agent, "agent", "", "cancel: only the calls of this agent")
	fs.StringVar(&c.tenant, "tenant", "", "cancel: only the calls of this tenant")
	fs.DurationVar(&c.olderThan, "older-than", 0, "cancel: only the calls queued for longer")
	fs.BoolVar(&c.json, "json", false, "list and dead: print JSON")
}

// Run runs the subcommand of args on the tools of cfg, printing to w.
func (c *CLI) Run(ctx context.Context, cfg Config, args []string, w io.Writer) error {
	sub, rest := "list", args
	if len(args) > 0 {
		sub, rest = args[0], args[1:]
	}
	want := map[string]int{"list": 0, "pause": 1, "resume": 1, "dead": -1, "replay": 2, "discard": 2, "cancel": 1}
	n, ok := want[sub]
	switch {
	case !ok:
		return fmt.Errorf("%w: unknown subcommand %q of agent tools (list, pause, resume, dead, replay, discard, cancel)", ErrUsage, sub)
	case n >= 0 && len(rest) != n, n < 0 && len(rest) > 1:
		return fmt.Errorf("%w: agent %s", ErrUsage, CLIUse)
	}
	by := c.by
	var seq uint64
	if n == 2 {
		var err error
		if seq, err = strconv.ParseUint(rest[1], 10, 64); err != nil || seq == 0 {
			return fmt.Errorf("%w: %q is no dead letter's sequence (see agent tools dead)", ErrUsage, rest[1])
		}
	}
	ctl, err := New(cfg)
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		tools, err := ctl.List(ctx)
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(w, tools)
		}
		writeTools(w, tools, time.Now())
	case "pause":
		var until time.Time
		if c.until > 0 {
			until = time.Now().Add(c.until)
		}
		if err := ctl.Pause(ctx, rest[0], until, by); err != nil {
			return err
		}
		fmt.Fprintf(w, "tool %s paused%s: its new calls wait in its queue (agent tools resume %s)\n", rest[0], untilText(until), rest[0])
	case "resume":
		if err := ctl.Resume(ctx, rest[0], by); err != nil {
			return err
		}
		fmt.Fprintf(w, "tool %s resumed\n", rest[0])
	case "dead":
		name := ""
		if len(rest) == 1 {
			name = rest[0]
		}
		letters, err := ctl.DeadLetters(ctx, name)
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(w, letters)
		}
		writeDead(w, letters)
	case "replay":
		task, err := ctl.Replay(ctx, rest[0], seq, by)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "dead letter %d replayed: task %s, attempt %d\n", seq, task.TaskID, task.Attempt)
	case "discard":
		if err := ctl.Discard(ctx, rest[0], seq, by); err != nil {
			return err
		}
		fmt.Fprintf(w, "dead letter %d discarded\n", seq)
	case "cancel":
		got, err := ctl.Cancel(ctx, Filter{Tool: rest[0], Agent: c.agent, Tenant: c.tenant, OlderThan: c.olderThan}, by)
		if err != nil {
			return err
		}
		for _, x := range got {
			fmt.Fprintf(w, "cancelled task %s of conversation %s\n", x.Task, x.Conversation)
		}
		fmt.Fprintf(w, "%d queued calls of tool %s cancelled\n", len(got), rest[0])
	}
	return nil
}

func untilText(t time.Time) string {
	if t.IsZero() {
		return " until resumed"
	}
	return " until " + t.UTC().Format(time.RFC3339)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTools prints tools as a table: one line each.
func writeTools(w io.Writer, tools []Tool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tWORKERS\tIN FLIGHT\tQUEUED\tUNDELIVERED\tDEAD\tLIMITS\tSTATE")
	for _, t := range tools {
		state := "running"
		switch {
		case t.Paused != nil:
			state = "paused" + untilText(t.Paused.Until) + " by " + t.Paused.By
		case !t.CoolDownUntil.IsZero():
			state = fmt.Sprintf("cooling down %s", t.CoolDownUntil.Sub(now).Round(100*time.Millisecond))
			if t.CoolDownKey != "" {
				state += " (" + t.CoolDownKey + ")"
			}
		}
		workers := strings.Join(t.Workers, ",")
		if workers == "" {
			workers = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", t.Name, workers, t.InFlight, t.Queued, t.Undelivered, t.DeadLetters, t.Limits.String(), state)
	}
	_ = tw.Flush()
}

// writeDead prints dead letters as a table: one line each.
func writeDead(w io.Writer, letters []DeadLetter) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTOOL\tTASK\tATTEMPT\tCONVERSATION\tREASON\tDELIVERIES\tKEPT")
	for _, d := range letters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", d.Seq, d.Tool, d.Task, d.Attempt, d.Conversation, d.Reason, d.Deliveries, d.At.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
}
