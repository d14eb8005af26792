package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/tool"
)

// specExtras are the parts of a spec that have no flag.
type specExtras struct {
	instructions *string
	tokens       *int
	// background holds the selectors of the spec's BackgroundTools
	// capabilities; none means one capability with the default selector.
	background []agent.Selector
	// external are the spec's external_tools.
	external []tool.Def
	// unapplied names the validated sections whose features have not
	// landed yet.
	unapplied []string
}

// apply sets what the spec gave on an agent configuration.
func (x *specExtras) apply(cfg *agent.Config) {
	if x.instructions != nil {
		cfg.Instructions = *x.instructions
	}
	if x.tokens != nil {
		cfg.Limits.TotalTokens = agent.Limit(*x.tokens)
	}
}

var approveModes = agentspec.ApproveModes

// applySpec reads --spec, if given, into f: a flag set on the command line
// wins over the spec.
func applySpec(fl *pflag.FlagSet, f *runFlags) error {
	if f.spec == "" {
		return nil
	}
	s, err := agentspec.Load(f.spec)
	if err != nil {
		return usageErr("--spec %s: %v", f.spec, err)
	}
	set := func(flag string, apply func()) {
		if !fl.Changed(flag) {
			apply()
		}
	}
	if s.Model != "" {
		set("model", func() { f.model = s.Model })
	}
	if s.Tools != nil {
		set("tools", func() { f.tools = strings.Join(s.Tools, ",") })
	}
	if s.Approve != "" {
		set("approve", func() { f.approve = s.Approve })
	}
	f.extras.instructions = s.Instructions
	if l := s.Limits; l != nil {
		if l.Requests != nil {
			set("request-limit", func() { f.requestLimit = *l.Requests })
		}
		if l.ToolCalls != nil {
			set("tool-calls-limit", func() { f.toolCallsLimit = *l.ToolCalls })
		}
		f.extras.tokens = l.Tokens
	}
	if ms := s.ModelSettings; ms != nil {
		mf := &f.mf
		if ms.Stream != nil {
			set("stream", func() { mf.stream = *ms.Stream })
		}
		if d, ok := s.IdleTimeout(); ok {
			set("model-idle-timeout", func() { mf.idleTimeout = d })
		}
		if ms.Retries != nil {
			set("model-retries", func() { mf.retries = *ms.Retries })
		}
		if ms.StreamUsage != nil {
			mf.streamUsage = ms.StreamUsage
		}
		if ms.MaxTokens != nil {
			mf.maxTokens = *ms.MaxTokens
		}
		mf.temperature, mf.parallelToolCalls, mf.extraBody = ms.Temperature, ms.ParallelToolCalls, ms.ExtraBody
	}
	sels, err := s.Selectors()
	if err != nil {
		return usageErr("--spec %s: %v", f.spec, err)
	}
	f.extras.background = sels
	f.extras.external = s.ExternalDefs()
	return nil
}
