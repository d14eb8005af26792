package main

import (
	"cmp"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/offload-dev/offload/internal/natsflags"
	"github.com/offload-dev/offload/internal/proc"
	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/agentspec"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/telemetry"
)

// runFlags are the flags of `agent run`.
type runFlags struct {
	// role is the role of deploy/nats/auth.conf the command needs, named
	// in the fix of a permission refused (default agent); not a flag.
	role string
	// trustNATSBy (agent serve --trust-nats-by) counts every decision's
	// by as its approver's identity for a quorum (SPEC §12).
	trustNATSBy    bool
	model          string
	json           bool
	toolCallsLimit int
	requestLimit   int
	tools          string
	approve        string
	root           string
	toolUser       string // --tool-user: who shell runs as under root
	verbose        bool
	store          string
	prefix         string
	local          bool
	metricsAddr    string
	spec           string
	wait           time.Duration
	callTimeout    time.Duration
	conversation   string
	tenant         string // --tenant: a new conversation's, that a stored one must have (SPEC §19)
	// resume is set for agent resume: the answers given on its command
	// line.
	resume *session.Answers
	mf     modelFlags      // model transport
	conn   natsflags.Flags // the NATS connection
	// agentSpec is the spec of --spec, once read (nil without one);
	// toolsFrom where tools came from when not from --tools.
	agentSpec *agentspec.Spec
	toolsFrom string
}

// registerRunFlags registers the flags run and resume share.
func registerRunFlags(cmd *cobra.Command, f *runFlags, e env) {
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "model: openai:NAME, test or script:FILE (default openai:gpt-4o-mini when OPENAI_API_KEY is set, else test)")
	fl.BoolVar(&f.json, "json", false, "write events as JSON lines on stdout; the last line is the final event")
	fl.IntVar(&f.toolCallsLimit, "tool-calls-limit", -1, "maximum successful tool calls in the run (-1: no limit)")
	fl.IntVar(&f.requestLimit, "request-limit", agent.DefaultRequestLimit, "maximum model requests in the run")
	fl.StringVar(&f.tools, "tools", "", "comma-separated tools to offer (default: all; on the embedded default every built-in tool but shell, offered only when named)")
	fl.StringVar(&f.approve, "approve", "", "how approvals are decided: ask, wait, defer, all, none or background (the run goes on while a person decides; default ask when stdin and stdout are terminals, else defer)")
	fl.DurationVar(&f.wait, "wait", 5*time.Minute, "with --approve wait: how long to wait for decisions before pausing")
	fl.DurationVar(&f.callTimeout, "call-timeout", remote.DefaultInlineDeadline, "deadline of an inline remote call: past it (and a 5s grace for the worker's answer) the call fails with DeadlineExceeded and its task is cancelled")
	fl.StringVar(&f.conversation, "conversation", "", "continue the stored conversation with this ID")
	fl.StringVar(&f.tenant, "tenant", "", "tenant of a new conversation (a stored one must have it): its tasks carry it and workers' limits keyed by tenant hold per tenant")
	fl.StringVar(&f.root, "root", ".", "directory the built-in file and shell tools work in")
	fl.StringVar(&f.toolUser, "tool-user", proc.DefaultToolUser, "when the agent runs as root: the user (name or ID) the embedded default's shell commands run as, every privilege dropped (root or empty: as root, able to read the agent's secrets)")
	fl.BoolVar(&f.local, "local", false, "run the built-in tools in this process, without NATS (nothing is stored)")
	fl.StringVar(&f.metricsAddr, "metrics", "", "serve Prometheus metrics on ADDR/metrics while the run lasts (e.g. 127.0.0.1:9100)")
	fl.StringVar(&f.spec, "spec", "", "YAML file of the agent: model, instructions, limits, tools, approve, model_settings, ... (flags given win)")
	fl.BoolVar(&f.trustNATSBy, "trust-nats-by", false, "count every decision's by as its approver's identity for a quorum (approval.required), as agent serve --trust-nats-by")
	f.mf.register(fl)
	registerStoreFlags(cmd, f, e)
}

// registerStoreFlags registers the flags that name the server and the
// store.
func registerStoreFlags(cmd *cobra.Command, f *runFlags, e env) {
	fl := cmd.Flags()
	fl.StringVar(&f.store, "store", "./.offload", "directory of the embedded server's data and URL file")
	fl.StringVar(&f.prefix, "prefix", protocol.DefaultPrefix, "subject prefix")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log more on stderr")
	f.conn.Register(fl, e.getenv, e.getenv("NATS_URL"), "NATS server URL, or a comma-separated list of a cluster's (env NATS_URL; default: the embedded server of --store, started when none runs)")
}

// modelFlags are the model transport flags of SPEC §6.1 (model_settings
// of --spec may give them too).
type modelFlags struct {
	stream      bool
	idleTimeout time.Duration
	retries     int
	// logger receives the adapter's retry warnings.
	logger *slog.Logger
}

// Defaults of the model transport flags.
const (
	defaultIdleTimeout  = 60 * time.Second
	defaultModelRetries = 3
)

// register adds --stream, --model-idle-timeout and --model-retries.
func (mf *modelFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&mf.stream, "stream", true, "stream model responses (--stream=false for servers that stream badly)")
	fl.DurationVar(&mf.idleTimeout, "model-idle-timeout", defaultIdleTimeout, "cut and retry a model response silent that long (0: never)")
	fl.IntVar(&mf.retries, "model-retries", defaultModelRetries, "new attempts of a model request after a 429, a 5xx, or a cut or silent response (0: none)")
}

// validate checks the values of the flags.
func (mf *modelFlags) validate() error {
	switch {
	case mf.idleTimeout < 0:
		return usageErr("--model-idle-timeout must not be negative")
	case mf.retries < 0:
		return usageErr("--model-retries must not be negative")
	}
	return nil
}

// newModel builds the model named by --model (agentproc.Model): openai
// models are called with the transport of mf and model_settings.
func newModel(f *runFlags, getenv func(string) string) (llm.Model, error) {
	mf := &f.mf
	if err := mf.validate(); err != nil {
		return nil, err
	}
	m, err := agentproc.Model(agentproc.ModelOptions{Ref: f.model, Getenv: getenv, Spec: f.agentSpec, Retries: mf.retries,
		IdleTimeout: mf.idleTimeout, Logger: mf.logger})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return m, nil
}

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
	f.agentSpec = s
	set := func(flag string, given bool, apply func()) {
		if given && !fl.Changed(flag) {
			apply()
		}
	}
	l, ms := cmp.Or(s.Limits, &agentspec.Limits{}), cmp.Or(s.ModelSettings, &agentspec.ModelSettings{})
	idle, idleGiven := s.IdleTimeout()
	set("model", s.Model != "", func() { f.model = s.Model })
	set("tools", s.Tools != nil, func() { f.tools, f.toolsFrom = strings.Join(s.ToolNames(), ","), "the tools of --spec "+f.spec })
	set("approve", s.Approve != "", func() { f.approve = s.Approve })
	set("tenant", s.Tenant != "", func() { f.tenant = s.Tenant })
	set("request-limit", l.Requests != nil, func() { f.requestLimit = *l.Requests })
	set("tool-calls-limit", l.ToolCalls != nil, func() { f.toolCallsLimit = *l.ToolCalls })
	set("stream", ms.Stream != nil, func() { f.mf.stream = *ms.Stream })
	set("model-idle-timeout", idleGiven, func() { f.mf.idleTimeout = idle })
	set("model-retries", ms.Retries != nil, func() { f.mf.retries = *ms.Retries })
	// The rest (instructions, tokens, capabilities, external tools,
	// request settings) is the spec's alone: runAgent applies it.
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// newLogger returns the command's logger on stderr: warnings, and info
// with --verbose.
func newLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(telemetry.LogHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})))
}

// externalNames are the names of the spec's external tools.
func (f *runFlags) externalNames() []string {
	var names []string
	for _, d := range f.agentSpec.ExternalDefs() {
		names = append(names, d.Name)
	}
	return names
}
