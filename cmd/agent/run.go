package main

import (
	"context"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/internal/opsserver"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/agentmetrics"
	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/llm/modelref"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

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

func runAgent(ctx context.Context, e env, f *runFlags, prompt string) error {
	logger := newLogger(e.stderr, f.verbose)
	out := newPrinter(e, f.json)

	if f.approve == "" {
		f.approve = "defer"
		if e.isTerminal {
			f.approve = "ask"
		}
	}
	if !slices.Contains(agentspec.ApproveModes, f.approve) {
		return usageErr("unknown --approve %q: use ask, wait, defer, all, none or background", f.approve)
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
	if err := protocol.ValidateTenant(f.tenant); err != nil {
		return usageErr("--tenant: %v", err)
	}
	continuing := f.conversation != "" || f.resume != nil
	if f.local && continuing {
		return usageErr("--local keeps no conversation: drop it to continue a stored one")
	}
	if f.local && f.approve == "wait" {
		return usageErr("--approve wait reads decisions from NATS: drop --local")
	}
	if f.local && f.approve == "background" {
		return usageErr("--approve background reads decisions from NATS: drop --local")
	}
	if f.conversation != "" {
		if _, err := protocol.ParseID(f.conversation); err != nil {
			return usageErr("--conversation: %v", err)
		}
	}
	f.mf.logger = logger
	if f.model == "" {
		f.model = modelref.Default(e.getenv)
	}
	model, err := newModel(f, e.getenv)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	am, approvals := metrics.NewAgent(reg), metrics.NewApprovals(reg)
	if f.metricsAddr != "" {
		stop, err := opsserver.Start(f.metricsAddr, reg, nil, logger)
		if err != nil {
			return usageErr("--metrics: %v", err)
		}
		defer stop()
	}
	ao := agentproc.AgentOptions{Spec: f.agentSpec, Model: model, Stream: f.mf.stream, Metrics: am, TracerProvider: e.tracer, Logger: logger,
		Limits: agent.UsageLimits{Requests: agent.Limit(f.requestLimit)}}
	if f.toolCallsLimit >= 0 {
		ao.Limits.ToolCalls = agent.Limit(f.toolCallsLimit)
	}
	// --approve all|none|ask decides approvals within the run; defer and
	// wait leave them pending so the run pauses.
	if h := agentspec.Approvals(f.approve, liveview.Ask(e.stdin, e.stderr)); h != nil {
		ao.Capabilities = append(ao.Capabilities, agent.HandleDeferredToolCalls(agentmetrics.TimeApprovals(am, h)))
	}
	opts := &agent.RunOptions{OnEvent: out.Event, Suspend: e.suspend, Tenant: f.tenant} // stored, the conversation's wins
	if !f.local {
		rem, err := openAgent(ctx, e, f, logger, procOptions{conversations: true, key: agentproc.KeyBestEffort, metrics: am, approvals: approvals})
		if err != nil {
			return out.Failed(err)
		}
		defer rem.close()
		// Background calls of the tools workers serve run there.
		ao.Toolset, ao.Executor = rem.proc.Client.Toolset(), rem.proc.Client.Executor()
		cfg, err := agentproc.AgentConfig(ao)
		if err != nil {
			return usageErr("--spec: %v", err)
		}
		return runDurable(ctx, e, f, cfg, rem, am, out, opts, prompt)
	}
	all, err := builtinTools(f, builtin.Config{Root: f.root, Logger: logger, DenyPaths: []string{f.store}, Reaper: e.reaper, ToolUser: f.toolUser})
	if err != nil {
		return err
	}
	if ao.Toolset, err = tool.NewSet(all...); err != nil {
		return err
	}
	cfg, err := agentproc.AgentConfig(ao)
	if err != nil {
		return usageErr("--spec: %v", err)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return usageErr("%v", err)
	}
	res, err := a.Run(ctx, prompt, opts)
	return out.Finish(res, err)
}

// builtinTools builds the built-in tools with cfg, those of --tools
// (all without it), checking that --tools names no other tool than them
// and the spec's external ones.
func builtinTools(f *runFlags, cfg builtin.Config) ([]*tool.Tool, error) {
	want := splitList(f.tools)
	if err := tool.CheckOffered(want, builtin.Names(), f.externalNames()); err != nil {
		return nil, notOffered(err, f.toolsFrom, "the built-in tools", "")
	}
	all, err := builtin.Offered(cfg, want)
	if err != nil {
		return nil, usageErr("built-in tools: %v", err)
	}
	return all, nil
}
