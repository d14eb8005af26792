package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/offload-dev/offload/pkg/agent/liveview"
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
	// view is the live view on stderr (without --json).
	view *liveview.View
}

func newPrinter(e env, jsonOut bool) *printer {
	return &printer{e: e, json: jsonOut, enc: json.NewEncoder(e.stdout), view: liveview.New(e.stderr)}
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
	p.view.Event(ev)
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
