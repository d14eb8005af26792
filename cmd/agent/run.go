package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/internal/natsflags"
	"github.com/offload-dev/offload/internal/opsserver"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/agentmetrics"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm/modelref"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// runFlags are the flags of `agent run`.
type runFlags struct {
	model          string
	json           bool
	toolCallsLimit int
	requestLimit   int
	tools          string
	approve        string
	root           string
	verbose        bool
	store          string
	prefix         string
	local          bool
	metricsAddr    string
	spec           string
	wait           time.Duration
	callTimeout    time.Duration
	conversation   string
	// resume is set for agent resume: the answers given on its command
	// line.
	resume *resumeFlags
	mf     modelFlags // model transport (model.go)
	extras specExtras // what --spec sets without a flag (spec.go)
	conn   natsflags.Flags
}

func newRunCmd(e env) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run [flags] PROMPT",
		Short: "Start a conversation with PROMPT (or continue one with --conversation)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
				return usageErr("run takes exactly one non-empty PROMPT argument")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applySpec(cmd.Flags(), f); err != nil {
				return err
			}
			return runAgent(cmd.Context(), e, f, args[0])
		},
	}
	registerRunFlags(cmd, f, e)
	return cmd
}

// registerRunFlags registers the flags run and resume share.
func registerRunFlags(cmd *cobra.Command, f *runFlags, e env) {
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "model: openai:NAME, test or script:FILE (default openai:gpt-4o-mini when OPENAI_API_KEY is set, else test)")
	fl.BoolVar(&f.json, "json", false, "write events as JSON lines on stdout; the last line is the final event")
	fl.IntVar(&f.toolCallsLimit, "tool-calls-limit", -1, "maximum successful tool calls in the run (-1: no limit)")
	fl.IntVar(&f.requestLimit, "request-limit", agent.DefaultRequestLimit, "maximum model requests in the run")
	fl.StringVar(&f.tools, "tools", "", "comma-separated tools to offer (default: all)")
	fl.StringVar(&f.approve, "approve", "", "how approvals are decided: ask, wait, defer, all or none (default ask when stdin and stdout are terminals, else defer)")
	fl.DurationVar(&f.wait, "wait", 5*time.Minute, "with --approve wait: how long to wait for decisions before pausing")
	fl.DurationVar(&f.callTimeout, "call-timeout", remote.DefaultInlineDeadline, "deadline of an inline remote call: past it (and a 5s grace for the worker's answer) the call fails with DeadlineExceeded and its task is cancelled")
	fl.StringVar(&f.conversation, "conversation", "", "continue the stored conversation with this ID")
	fl.StringVar(&f.root, "root", ".", "directory the built-in file and shell tools work in")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log more on stderr")
	fl.StringVar(&f.store, "store", "./.offload", "directory of the embedded server's data and URL file")
	fl.StringVar(&f.prefix, "prefix", protocol.DefaultPrefix, "subject prefix")
	fl.BoolVar(&f.local, "local", false, "run the built-in tools in this process, without NATS (nothing is stored)")
	fl.StringVar(&f.metricsAddr, "metrics", "", "serve Prometheus metrics on ADDR/metrics while the run lasts (e.g. 127.0.0.1:9100)")
	fl.StringVar(&f.spec, "spec", "", "YAML file of the agent: model, instructions, limits, tools, approve, model_settings, ... (flags given win)")
	f.mf.register(fl)
	f.conn.Register(fl, e.getenv, e.getenv("NATS_URL"), "NATS server URL, or a comma-separated list of a cluster's (env NATS_URL; default: an embedded server on --store)")
}

func runAgent(ctx context.Context, e env, f *runFlags, prompt string) error {
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	out := newPrinter(e, f.json)

	if f.approve == "" {
		f.approve = "defer"
		if e.isTerminal {
			f.approve = "ask"
		}
	}
	if !slices.Contains(approveModes, f.approve) {
		return usageErr("unknown --approve %q: use ask, wait, defer, all or none", f.approve)
	}
	if f.wait <= 0 {
		return usageErr("--wait must be positive")
	}
	if f.callTimeout <= 0 {
		return usageErr("--call-timeout must be positive")
	}
	if f.requestLimit < 1 {
		return usageErr("--request-limit must be at least 1")
	}
	if err := protocol.ValidatePrefix(f.prefix); err != nil {
		return usageErr("--prefix: %v", err)
	}
	continuing := f.conversation != "" || f.resume != nil
	if f.local && continuing {
		return usageErr("--local keeps no conversation: drop it to continue a stored one")
	}
	if f.local && f.approve == "wait" {
		return usageErr("--approve wait reads decisions from NATS: drop --local")
	}
	if f.conversation != "" {
		if _, err := protocol.ParseID(f.conversation); err != nil {
			return usageErr("--conversation: %v", err)
		}
	}
	for _, sec := range f.extras.unapplied {
		logger.Warn("--spec: section validated but not applied yet", "section", sec)
	}
	f.mf.logger = logger
	if f.model == "" {
		f.model = modelref.Default(e.getenv)
	}
	model, err := newModel(f.model, e.getenv, nil, &f.mf)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	am := metrics.NewAgent(reg)
	if f.metricsAddr != "" {
		stop, err := opsserver.Start(f.metricsAddr, reg, nil, logger)
		if err != nil {
			return usageErr("--metrics: %v", err)
		}
		defer stop()
	}
	model = agentmetrics.Model(model, am)
	var toolset tool.Toolset
	var executor agent.Executor = agent.InProcessExecutor{}
	var rem *remoteConn
	if f.local {
		if toolset, err = localTools(f, logger); err != nil {
			return err
		}
	} else {
		r, release, err := remoteTools(ctx, e, f, logger, am)
		if err != nil {
			return out.failed(err)
		}
		defer release()
		rem = r
		toolset = r.client.Toolset()
		// Background calls of the tools workers serve run there.
		executor = r.client.Executor()
	}
	if len(f.extras.external) > 0 {
		ext, err := tool.External(f.extras.external...)
		if err != nil {
			return usageErr("--spec: external_tools: %v", err)
		}
		toolset = withExternal{base: toolset, external: ext}
	}
	cfg := agent.Config{
		Model:         model,
		Toolsets:      []tool.Toolset{toolset},
		Instructions:  "You are a helpful assistant. Use the tools when they help.",
		AllowDeferred: true,
		Stream:        f.mf.stream,
		Settings:      f.mf.settings(),
		Logger:        logger,
		Limits:        agent.UsageLimits{Requests: agent.Limit(f.requestLimit)},
	}
	f.extras.apply(&cfg)
	if f.toolCallsLimit >= 0 {
		cfg.Limits.ToolCalls = agent.Limit(f.toolCallsLimit)
	}
	cfg.Capabilities = append(cfg.Capabilities, agentmetrics.Runs(am))
	// BackgroundTools is on (SPEC §6.1): tools whose metadata says
	// background: true (or "optional") run in the background, unless the
	// spec's capabilities choose them otherwise.
	selectors := f.extras.background
	if len(selectors) == 0 {
		selectors = []agent.Selector{agent.DefaultSelector}
	}
	for _, sel := range selectors {
		cfg.Capabilities = append(cfg.Capabilities, agent.BackgroundTools(agent.BackgroundConfig{Tools: sel, Executor: executor, Logger: logger}))
	}
	if h := approvalHandler(f.approve, e, am); h != nil {
		cfg.Capabilities = append(cfg.Capabilities, h)
	}
	opts := &agent.RunOptions{OnEvent: out.event, Suspend: e.suspend}
	if rem != nil {
		return runDurable(ctx, e, f, cfg, rem, am, logger, out, opts, prompt)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return usageErr("%v", err)
	}
	res, err := a.Run(ctx, prompt, opts)
	return out.finish(res, err)
}

// builtinTools builds the built-in tools and checks the names of --tools
// against them.
func builtinTools(f *runFlags, logger *slog.Logger) ([]*tool.Tool, error) {
	all, err := builtin.Tools(builtin.Config{Root: f.root, Logger: logger, DenyPaths: []string{f.store}})
	if err != nil {
		return nil, usageErr("built-in tools: %v", err)
	}
	if err := checkToolNames(splitList(f.tools), builtin.Names(), f, "the built-in tools", ""); err != nil {
		return nil, err
	}
	return all, nil
}

// localTools returns the built-in tools run in this process, restricted to
// --tools.
func localTools(f *runFlags, logger *slog.Logger) (tool.Toolset, error) {
	all, err := builtinTools(f, logger)
	if err != nil {
		return nil, err
	}
	if want := splitList(f.tools); len(want) > 0 {
		all = slices.DeleteFunc(all, func(t *tool.Tool) bool { return !slices.Contains(want, t.Name) })
	}
	return tool.NewSet(all...)
}

// approvalHandler resolves approvals inline for --approve all|none|ask;
// defer leaves them pending so the run pauses.
func approvalHandler(mode string, e env, am *metrics.Agent) agent.Capability {
	decide := func(c message.ToolCall) any { return true }
	switch mode {
	case "all":
	case "none":
		decide = func(message.ToolCall) any { return false }
	case "ask":
		in := bufio.NewReader(e.stdin)
		decide = func(c message.ToolCall) any {
			fmt.Fprintf(e.stderr, "approve %s %s? [y/N, or a reason to deny] ", c.ToolName, c.ArgsJSON())
			line, _ := in.ReadString('\n')
			line = strings.TrimSpace(line)
			switch strings.ToLower(line) {
			case "y", "yes":
				return true
			case "", "n", "no":
				return false
			}
			return deferred.ToolDenied{Message: line}
		}
	default:
		return nil
	}
	return agent.HandleDeferredToolCalls(agentmetrics.TimeApprovals(am, func(_ context.Context, _ *tool.RunContext, reqs *deferred.Requests) (*deferred.Results, error) {
		res := &deferred.Results{Approvals: map[string]any{}}
		for _, c := range reqs.Approvals {
			res.Approvals[c.ToolCallID] = decide(c)
		}
		return res, nil
	}))
}

// printer writes a run's events: JSON lines with --json, else a short live
// view on stderr and the final output on stdout.
type printer struct {
	e        env
	json     bool
	mu       sync.Mutex
	enc      *json.Encoder
	final    *agent.Final
	convSeen bool
	convID   string // the conversation, for final events of no run
	runID    string
	// resolve, when set, gives the commands that resolve a pending call.
	resolve func(deferred.PendingTask) []string
	// resumeHint, when set, is the command that continues a paused
	// conversation.
	resumeHint string
	// running are the live background tasks of the live view, by task ID,
	// in start order (order).
	running map[string]*liveTask
	order   []string
	// said is the text of the model's current response: shown on stderr
	// once the response turns out not to be the final one (a tool call
	// or another request follows), since stdout carries only the final
	// output.
	said strings.Builder
	// deferred names the deferred calls of the run by tool call ID, for
	// the lines that say how they were resolved.
	deferred map[string]deferredCall
}

// deferredCall is a deferred call in the human output.
type deferredCall struct{ tool, task string }

// liveTask is a running background task in the live view.
type liveTask struct {
	tool    string
	started time.Time
	last    string // last progress message
}

func newPrinter(e env, jsonOut bool) *printer {
	return &printer{e: e, json: jsonOut, enc: json.NewEncoder(e.stdout)}
}

func (p *printer) event(ev agent.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.RunID != "" {
		p.runID = ev.RunID
	}
	if !p.convSeen && ev.ConversationID != "" {
		p.convSeen = true
		fmt.Fprintf(p.e.stderr, "conversation: %s\n", ev.ConversationID)
	}
	if ev.Type == agent.EventFinal {
		p.final = ev.Final
	}
	if p.json {
		p.encode(ev)
		return
	}
	switch ev.Type {
	case agent.EventTextDelta:
		p.said.WriteString(ev.Delta)
		return
	case agent.EventModelRequestRetry:
		p.said.Reset() // the failed attempt's deltas are void
		return
	case agent.EventFinal:
		p.said.Reset() // the final output goes to stdout
		p.keptTasks(ev)
		return
	}
	if text := strings.TrimSpace(p.said.String()); text != "" {
		fmt.Fprintf(p.e.stderr, "model: %s\n", text)
	}
	p.said.Reset()
	switch ev.Type {
	case agent.EventDeferredToolRequests:
		p.deferredRequests(ev.Requests)
	case agent.EventDeferredToolResults:
		p.deferredResults(ev.Results)
	case agent.EventToolCall:
		task := ""
		if ev.TaskID != "" {
			task = " (task " + ev.TaskID + ")"
		}
		fmt.Fprintf(p.e.stderr, "→ %s %s%s\n", ev.Tool, compact(ev.Args), task)
	case agent.EventToolResult:
		fmt.Fprintf(p.e.stderr, "← %s %s: %s\n", ev.Tool, ev.Outcome, clip(message.ContentText(ev.Content), 200))
	case agent.EventProgress:
		pct := ""
		if ev.Fraction != nil {
			pct = fmt.Sprintf(" (%.0f%%)", *ev.Fraction*100)
		}
		task := ""
		if ev.TaskID != "" {
			task = " task " + ev.TaskID
		}
		elapsed := ""
		if lt := p.running[ev.TaskID]; lt != nil {
			lt.last = ev.Message + pct
			elapsed = " [" + since(lt.started, ev.At) + "]"
		}
		fmt.Fprintf(p.e.stderr, "… %s%s%s: %s%s\n", ev.Tool, task, elapsed, ev.Message, pct)
	case agent.EventBackgroundTaskStarted:
		if p.running == nil {
			p.running = map[string]*liveTask{}
		}
		p.running[ev.TaskID] = &liveTask{tool: ev.Tool, started: ev.At}
		p.order = append(p.order, ev.TaskID)
		fmt.Fprintf(p.e.stderr, "⇢ %s task %s running in the background\n", ev.Tool, ev.TaskID)
	case agent.EventBackgroundTaskFinished:
		elapsed := ""
		if lt := p.running[ev.TaskID]; lt != nil {
			elapsed = " after " + since(lt.started, ev.At)
			delete(p.running, ev.TaskID)
			p.order = slices.DeleteFunc(p.order, func(id string) bool { return id == ev.TaskID })
		}
		fmt.Fprintf(p.e.stderr, "⇠ %s task %s %s%s\n", ev.Tool, ev.TaskID, ev.Status, elapsed)
	case agent.EventModelRequestStarted:
		// The model's turn: say what still runs in the background.
		for _, id := range p.order {
			lt := p.running[id]
			last := ""
			if lt.last != "" {
				last = ": " + lt.last
			}
			fmt.Fprintf(p.e.stderr, "⋯ %s task %s running for %s%s\n", lt.tool, id, since(lt.started, ev.At), last)
		}
	}
}

// keptTasks says, when the run paused (a deferred call, SIGTERM), which
// background tasks run on for the resume: a detached task has not
// finished, and gets no finished event.
func (p *printer) keptTasks(ev agent.Event) {
	if ev.Final == nil || ev.Final.Status != agent.StatusPaused {
		return
	}
	for _, pt := range ev.Final.Pending {
		if pt.Kind != deferred.KindBackground {
			continue
		}
		elapsed := ""
		if lt := p.running[pt.TaskID]; lt != nil {
			elapsed = " after " + since(lt.started, ev.At)
		}
		fmt.Fprintf(p.e.stderr, "⇠ %s task %s still running%s; kept for the resume\n", pt.Tool, pt.TaskID, elapsed)
	}
}

// deferredRequests says which calls wait for a decision or an answer.
func (p *printer) deferredRequests(reqs *deferred.Requests) {
	if reqs == nil {
		return
	}
	if p.deferred == nil {
		p.deferred = map[string]deferredCall{}
	}
	for _, c := range reqs.Approvals {
		p.deferred[c.ToolCallID] = deferredCall{c.ToolName, reqs.TaskIDs[c.ToolCallID]}
		fmt.Fprintf(p.e.stderr, "? %s task %s needs approval\n", c.ToolName, reqs.TaskIDs[c.ToolCallID])
	}
	for _, c := range reqs.Calls {
		p.deferred[c.ToolCallID] = deferredCall{c.ToolName, reqs.TaskIDs[c.ToolCallID]}
		fmt.Fprintf(p.e.stderr, "? %s task %s waits for an answer from outside\n", c.ToolName, reqs.TaskIDs[c.ToolCallID])
	}
}

// deferredResults says how deferred calls were resolved within the run
// (--approve all|none|ask|wait).
func (p *printer) deferredResults(res *deferred.Results) {
	if res == nil {
		return
	}
	say := func(id, what string) {
		dc, ok := p.deferred[id]
		if !ok {
			dc = deferredCall{tool: "call " + id}
		}
		task := ""
		if dc.task != "" {
			task = " task " + dc.task
		}
		fmt.Fprintf(p.e.stderr, "! %s%s %s\n", dc.tool, task, what)
	}
	for _, id := range slices.Sorted(maps.Keys(res.Approvals)) {
		switch v := res.Approvals[id].(type) {
		case bool:
			if v {
				say(id, "approved")
			} else {
				say(id, "denied")
			}
		case deferred.ToolApproved:
			say(id, "approved")
		case deferred.ToolDenied:
			say(id, "denied: "+v.Text())
		}
	}
	for _, id := range slices.Sorted(maps.Keys(res.Calls)) {
		say(id, "answered")
	}
}

// since renders the time from start to now, in whole seconds.
func since(start, now time.Time) string {
	return now.Sub(start).Truncate(time.Second).String()
}

// finish prints the outcome and maps it to the exit code.
func (p *printer) finish(_ *agent.Result, runErr error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.final
	if f == nil {
		// The run failed before it started (no events).
		return &exitError{code: exitFailed, err: runErr}
	}
	if !p.json {
		switch f.Status {
		case agent.StatusFinished:
			fmt.Fprintln(p.e.stdout, f.Output)
		case agent.StatusPaused:
			writePending(p.e.stdout, f.Pending, p.resolve)
		}
	}
	if f.Status == agent.StatusPaused {
		writePauseSummary(p.e.stderr, f.Pending, p.resumeHint)
	}
	var ue *agent.UserError
	switch {
	case f.Status == agent.StatusFinished:
		return nil
	case f.Status == agent.StatusPaused:
		return &exitError{code: exitPaused}
	case f.Status == agent.StatusInterrupted:
		msg := f.Error
		if msg == "" {
			msg = "interrupted"
		}
		return &exitError{code: exitInterrupted, err: errors.New(msg)}
	case errors.As(runErr, &ue):
		return &exitError{code: exitUsage, err: runErr}
	default:
		return &exitError{code: exitFailed, err: runErr}
	}
}

// writePending prints one line per pending call: task, kind, tool, args;
// then, when resolve is set, the commands that resolve it.
func writePending(w io.Writer, pending []deferred.PendingTask, resolve func(deferred.PendingTask) []string) {
	for _, p := range pending {
		fmt.Fprintf(w, "%s %s %s %s\n", p.TaskID, p.Kind, p.Tool, compact(p.Args))
		if resolve != nil {
			for _, c := range resolve(p) {
				fmt.Fprintln(w, c)
			}
		}
	}
}

func compact(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
