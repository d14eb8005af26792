package remote

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/startstop"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

// ClientConfig configures a [Client].
type ClientConfig struct {
	// Conn is the NATS connection of the dispatcher, the toolset and the
	// local worker. Required.
	Conn *nats.Conn
	// Prefix is the subject prefix. Defaults to [protocol.DefaultPrefix].
	Prefix string
	// Filter, when not nil, restricts the toolset to these tool names
	// (see [ToolsetConfig.Filter]).
	Filter []string
	// InlineDeadline is the deadline of an inline call (see
	// [DispatcherConfig.InlineDeadline]).
	InlineDeadline time.Duration
	// Fallback runs the background calls of tools no worker serves (see
	// [Toolset.Executor]). Defaults to background.InProcessExecutor{}.
	Fallback background.Executor
	// Policies are the agent's own policies for tools, by name, which no
	// registry entry overrides (see [ToolsetConfig.Policies]).
	Policies map[string]tool.Policy
	// Local are tools served by a worker of this process, on Conn (the
	// embedded default's built-in tools): it is started before the
	// toolset reads the registry, so that they are offered at once, and
	// stopped last, its running tasks handed back. None: no local worker.
	// The agent knows them: whatever another entry of one of their names
	// advertises, the tool is offered as defined here (its description,
	// schema and approval are its policy, beneath Policies).
	Local []*tool.Tool
	// LocalID names the local worker. Defaults to agent-<pid>.
	LocalID string
	// Logger receives the logs of the dispatcher, the toolset and the
	// local worker. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics, if set, records the dispatcher's metrics.
	Metrics *metrics.Agent
	// Replicas, when positive, is the replication factor of the streams
	// created, compared with existing ones (see
	// [natsjs.ProvisionOptions.Replicas]).
	Replicas int
	// MemoryStorage creates missing streams in memory (tests).
	MemoryStorage bool
	// TaskKey, when set, authenticates the tasks the dispatcher publishes
	// ([DispatcherConfig.TaskKey]) and is required by the local worker of
	// the approved tasks it runs (worker.Config.TaskKey): the embedded
	// default's store key.
	TaskKey []byte
	// TracerProvider, if set, records the dispatcher's spans and the local
	// worker's ([DispatcherConfig.TracerProvider]). Nil records none.
	TracerProvider trace.TracerProvider
	// PerConversation reads each conversation's results on its own (see
	// [DispatcherConfig.PerConversation]; [Client.Unfollow] ends a
	// conversation's reading).
	PerConversation bool
}

// localGrace is the local worker's grace period. The client stops it with
// StopAndCancel: its running tasks are handed back at once.
const localGrace = 5 * time.Second

// Client is what an agent process uses of the workers: a [Dispatcher] of
// tasks, the [Toolset] of the tools workers advertise (offered to the
// model), its [Executor] of background calls (with a fallback for the
// other tools), and optionally a worker of this process serving local
// tools. It starts and stops them together, in order. It also answers for
// the tasks of a stored conversation: [Client.Attach] waits for the
// results of the background tasks a paused run left running, before a
// resume reads the stream, and [Client.Cancel] cancels a task (the session
// package's TaskAttacher and Canceller).
type Client struct {
	cfg  ClientConfig
	life startstop.Base
	w    *worker.Worker // nil without local tools
	d    *Dispatcher
	ts   *Toolset
	ex   *Executor
}

// NewClient checks cfg and builds the client's parts, ready to
// [Client.Start].
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: client: no Conn", natsjs.ErrInvalidConfig)
	}
	if cfg.Fallback == nil {
		cfg.Fallback = background.InProcessExecutor{}
	}
	c := &Client{cfg: cfg}
	if len(cfg.Local) > 0 {
		id := cfg.LocalID
		if id == "" {
			id = "agent-" + strconv.Itoa(os.Getpid())
		}
		w, err := worker.New(worker.Config{Conn: cfg.Conn, Prefix: cfg.Prefix, ID: id, Tools: cfg.Local, Replicas: cfg.Replicas,
			GracePeriod: localGrace, Logger: cfg.Logger, MemoryStorage: cfg.MemoryStorage, TaskKey: cfg.TaskKey,
			TracerProvider: cfg.TracerProvider})
		if err != nil {
			return nil, err
		}
		c.w = w
	}
	d, err := NewDispatcher(DispatcherConfig{Conn: cfg.Conn, Prefix: cfg.Prefix, Replicas: cfg.Replicas, Logger: cfg.Logger,
		Metrics: cfg.Metrics, InlineDeadline: cfg.InlineDeadline, MemoryStorage: cfg.MemoryStorage, TaskKey: cfg.TaskKey,
		TracerProvider: cfg.TracerProvider, PerConversation: cfg.PerConversation})
	if err != nil {
		return nil, err
	}
	ts, err := NewToolset(ToolsetConfig{Conn: cfg.Conn, Prefix: cfg.Prefix, Replicas: cfg.Replicas, Dispatcher: d,
		Filter: cfg.Filter, Policies: localPolicies(cfg.Policies, cfg.Local), Metrics: cfg.Metrics, Logger: cfg.Logger,
		MemoryStorage: cfg.MemoryStorage})
	if err != nil {
		return nil, err
	}
	c.d, c.ts, c.ex = d, ts, ts.Executor(cfg.Fallback)
	return c, nil
}

// localPolicies returns policies with, for each local tool, its own
// definition as its policy beneath the one given: the given policy's
// description and schema win where it pins them, and approval is required
// when either requires it.
func localPolicies(policies map[string]tool.Policy, local []*tool.Tool) map[string]tool.Policy {
	if len(local) == 0 {
		return policies
	}
	out := make(map[string]tool.Policy, len(policies)+len(local))
	maps.Copy(out, policies)
	for _, t := range local {
		p := tool.Policy{RequiresApproval: t.RequiresApproval, Description: t.Description, Parameters: t.Parameters}
		if given, ok := policies[t.Name]; ok {
			p.RequiresApproval = p.RequiresApproval || given.RequiresApproval
			p.Description = cmp.Or(given.Description, p.Description)
			if given.Parameters != nil {
				p.Parameters = given.Parameters
			}
			p.External = given.External
		}
		out[t.Name] = p
	}
	return out
}

// Start starts the local worker (if any), the dispatcher and the toolset,
// in that order; ctx bounds the start-up only. On error what was started
// is stopped again and the client is stopped.
func (c *Client) Start(ctx context.Context) (err error) {
	if c.life.StartInit() != nil {
		return natsjs.ErrStarted
	}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = c.shutdown(sctx)
			c.life.StartFailed()
		}
	}()
	if c.w != nil {
		if err := c.w.Start(ctx); err != nil {
			return fmt.Errorf("local tools worker: %w", err)
		}
	}
	if err := c.d.Start(ctx); err != nil {
		return err // it names the dispatcher
	}
	return c.ts.Start(ctx) // it names the remote toolset
}

// Stop stops the toolset, the dispatcher (calls still waiting return
// natsjs.ErrStopped) and the local worker (its running tasks handed back),
// in that order; ctx bounds it. It returns what they returned. Stopping
// twice is harmless: every caller waits for the one stop.
func (c *Client) Stop(ctx context.Context) error {
	return c.life.Stop(func() error { return c.shutdown(ctx) })
}

func (c *Client) shutdown(ctx context.Context) error {
	errs := []error{c.ts.Stop(ctx), c.d.Stop(ctx)}
	if c.w != nil {
		errs = append(errs, c.w.StopAndCancel(ctx))
	}
	return errors.Join(errs...)
}

// Stopped is closed once the client has stopped.
func (c *Client) Stopped() <-chan struct{} { return c.life.Done() }

// Unfollow stops reading the results of conversation conv (see
// [Dispatcher.Unfollow]): its run on this process has ended.
func (c *Client) Unfollow(conv string) { c.d.Unfollow(conv) }

// Dispatcher returns the client's dispatcher.
func (c *Client) Dispatcher() *Dispatcher { return c.d }

// Toolset returns the toolset of the tools workers advertise.
func (c *Client) Toolset() *Toolset { return c.ts }

// Executor returns the executor of background calls: the toolset's tools
// run on workers, the others go to ClientConfig.Fallback.
func (c *Client) Executor() *Executor { return c.ex }

// Attach waits, from now on, for the results of the background tasks that
// conversation conv left running, before a resume reads the results
// stream: the dispatcher drops a result nobody waits for, so without it a
// result stored between that read and the run's own attach
// ([Executor.Attach]) would be missed. The run's Attach takes the handle;
// [Client.Release] lets go of a task whose outcome the resume read from
// the stream.
func (c *Client) Attach(conv string, tasks []deferred.PendingTask) error {
	return c.ex.attachAll(conv, tasks)
}

// Release lets go of a task attached with [Client.Attach] (its outcome
// came another way).
func (c *Client) Release(taskID string) { c.ex.release(taskID) }

// Cancel cancels task, a call of toolName, over the wire (see
// [Dispatcher.Cancel]).
func (c *Client) Cancel(ctx context.Context, conv, task, toolName, reason string) error {
	return c.d.Cancel(ctx, conv, task, toolName, reason)
}

// AwaitAnswers records the external calls of conv that wait for an
// answer (see [Dispatcher.AwaitAnswers]); it implements
// session.AnswerAwaiter.
func (c *Client) AwaitAnswers(conv string, tasks []string) { c.d.AwaitAnswers(conv, tasks) }

// Clashes returns the registry entries that clash with the agent's
// policies now (see [Toolset.Clashes]).
func (c *Client) Clashes() []Clash { return c.ts.Clashes() }

// Advertised returns every tool the workers advertise now, ignoring
// ClientConfig.Filter, and the registry entries that cannot be offered:
// what to name when a tool asked for is not offered.
func (c *Client) Advertised(ctx context.Context) ([]*tool.Tool, []SkippedEntry, error) {
	cfg := c.ts.cfg
	cfg.Filter = nil
	cfg.Metrics = nil // the clashes are counted by the client's own toolset
	all, err := NewToolset(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := all.Start(ctx); err != nil {
		return nil, nil, err
	}
	defer func() { _ = all.Stop(context.WithoutCancel(ctx)) }()
	tools, err := all.Tools(ctx)
	if err != nil {
		return nil, nil, err
	}
	return tools, all.Skipped(), nil
}

// CheckOffered checks that workers offer each tool of want, or that also
// names it (a tool offered another way, such as an external tool): for the
// first that is neither it returns a *tool.NotOfferedError naming every
// tool the workers advertise (ignoring ClientConfig.Filter). skipped are
// the registry entries that cannot be offered, to say why a tool may be
// missing.
func (c *Client) CheckOffered(ctx context.Context, want, also []string) (skipped []SkippedEntry, err error) {
	tools, err := c.ts.Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("tool registry: %w", err)
	}
	skipped = c.ts.Skipped()
	if err = tool.CheckOffered(want, tool.Names(tools), also); err == nil {
		return skipped, nil
	}
	if all, allSkipped, aerr := c.Advertised(ctx); aerr == nil {
		if err := tool.CheckOffered(want, tool.Names(all), also); err != nil {
			return allSkipped, err
		}
	}
	return skipped, err
}
