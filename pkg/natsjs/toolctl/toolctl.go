// Package toolctl is the operator's hands on a fleet's tools (SPEC §19):
// each tool's workers, limits, calls in flight and queued, cool-down and
// pause ([Control.List]); pausing and resuming a tool's dispatch; the dead
// letters (calls whose deliveries were exhausted) listed, replayed as a new
// attempt or discarded; the calls held in a tool's queue cancelled by
// filter. Every action is audited first, with who did it, on
// <prefix>.audit.<tool>: an action whose record cannot be stored is not
// taken. `agent tools` (pkg/natsjs/toolctl/toolcmd) and agent serve's
// /v1/tools call it.
package toolctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/natsjs/internal/toolstate"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/tool"
)

// Errors callers branch on.
var (
	// ErrNoDeadLetter: no dead letter of that sequence and tool is kept.
	ErrNoDeadLetter = service.ErrNoDeadLetter
	// ErrNeedsTaskKey: the dead letter is an approved task authenticated
	// by the store's task key, which this process does not hold: a replay
	// could not be authenticated.
	ErrNeedsTaskKey = service.ErrNeedsTaskKey
	// ErrNoBy: an action names nobody who takes it.
	ErrNoBy = errors.New("toolctl: an action needs who takes it")
)

// maxDeadLetters bounds the dead letters one listing reads.
const maxDeadLetters = 1000

// Config configures a [Control].
type Config struct {
	// Conn is the connection; required.
	Conn *nats.Conn
	// Provision names the streams and buckets (its Prefix; "" means
	// protocol.DefaultPrefix) and says how to create those of fleet
	// control when missing and the user may.
	Provision natsjs.ProvisionOptions
	// TaskKey, when set, authenticates a replayed approved task whose
	// dead letter carried a MAC (the embedded default's store key).
	TaskKey []byte
}

// Control is the operator's hands on the tools of one prefix.
type Control struct {
	cfg     Config
	ensured atomic.Bool
	js      jetstream.JetStream
	names   natsjs.Names
	subj    protocol.Subjects
	state   *toolstate.Store
}

// New returns the Control of cfg.
func New(cfg Config) (*Control, error) {
	if cfg.Conn == nil {
		return nil, errors.New("toolctl: Config.Conn is required")
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("toolctl: %w", err)
	}
	names := natsjs.NamesFor(cfg.Provision.Prefix)
	return &Control{cfg: cfg, js: js, names: names, subj: protocol.Subjects{Prefix: names.Prefix},
		state: toolstate.New(js, cfg.Conn, names)}, nil
}

// The views of the operator's hands, shared with the faces (package
// service).
type (
	// Tool is one tool as [Control.List] shows it.
	Tool = service.Tool
	// DeadLetter is a call whose deliveries were exhausted.
	DeadLetter = service.DeadLetter
	// Filter selects the queued calls [Control.Cancel] cancels.
	Filter = service.ToolFilter
	// Cancelled is a call [Control.Cancel] cancelled.
	Cancelled = service.CancelledCall
)

var _ service.Tools = (*Control)(nil)

// ensure finds the streams of fleet control, created when missing (and
// the user may: else the error names the fix), once per Control.
func (c *Control) ensure(ctx context.Context) error {
	if c.ensured.Load() {
		return nil
	}
	if err := natsjs.EnsureStreams(ctx, c.js, c.cfg.Provision, c.names.RegistryStream, c.names.LimitsStream, c.names.QueueStream, c.names.Dead, c.names.Audit); err != nil {
		return fmt.Errorf("toolctl: %w", err)
	}
	c.ensured.Store(true)
	return nil
}

// List returns every tool a worker advertises or that has a fleet control
// state, by name.
func (c *Control) List(ctx context.Context) ([]Tool, error) {
	if err := c.ensure(ctx); err != nil {
		return nil, err
	}
	byName := map[string]*Tool{}
	get := func(name string) *Tool {
		if byName[name] == nil {
			byName[name] = &Tool{Name: name, Workers: []string{}}
		}
		return byName[name]
	}
	reg, err := c.js.KeyValue(ctx, c.names.RegistryBucket)
	if err != nil {
		return nil, fmt.Errorf("toolctl: the registry: %w", err)
	}
	if err := eachKey(ctx, reg, func(key string, value []byte) {
		e, err := natsjs.ParseRegistryEntry(key, value)
		if err != nil || time.Now().After(e.ExpiresAt) {
			return
		}
		t := get(e.Name)
		t.Workers = append(t.Workers, e.Worker)
		if t.Limits == nil {
			t.Limits = e.Limits
		}
	}); err != nil {
		return nil, err
	}
	lim, err := c.js.KeyValue(ctx, c.names.LimitsBucket)
	if err != nil {
		return nil, fmt.Errorf("toolctl: the limits bucket: %w", err)
	}
	now := time.Now()
	if err := eachKey(ctx, lim, func(key string, value []byte) {
		name, ok := strings.CutSuffix(key, ".state")
		if !ok {
			return
		}
		var st limits.State
		if json.Unmarshal(value, &st) != nil {
			return
		}
		t := get(name)
		t.InFlight, t.Queued = st.Running(now), st.Waiting(now)
		t.CoolDownUntil, t.CoolDownKey = st.CoolUntil(now)
		if st.Pause.Active(now) {
			t.Paused = st.Pause
		}
	}); err != nil {
		return nil, err
	}
	if err := c.countDead(ctx, get); err != nil {
		return nil, err
	}
	out := make([]Tool, 0, len(byName))
	for _, t := range byName {
		sort.Strings(t.Workers)
		if cons, err := c.js.Consumer(ctx, c.names.Tasks, natsjs.TaskConsumerName(t.Name)); err == nil {
			t.Undelivered = int(cons.CachedInfo().NumPending) //nolint:gosec // G115: a count of messages
		}
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// eachKey calls fn with every key of kv and its value.
func eachKey(ctx context.Context, kv jetstream.KeyValue, fn func(key string, value []byte)) error {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("toolctl: read bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return nil // the initial values are all read
			}
			fn(e.Key(), e.Value())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// countDead counts the dead letters of each tool.
func (c *Control) countDead(ctx context.Context, get func(string) *Tool) error {
	s, err := c.js.Stream(ctx, c.names.Dead)
	if err != nil {
		return fmt.Errorf("toolctl: the dead letters' stream: %w", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(c.subj.Prefix+".dead.>"))
	if err != nil {
		return fmt.Errorf("toolctl: the dead letters' stream: %w", err)
	}
	for subject, n := range info.State.Subjects {
		if kind, _, _, name, err := c.subj.Parse(subject); err == nil && kind == protocol.KindDead {
			get(name).DeadLetters += int(n) //nolint:gosec // G115: a count of messages
		}
	}
	return nil
}

// Record is an operator's action as audited on <prefix>.audit.<tool>.
type Record struct {
	// Action is pause, resume, replay, discard or cancel.
	Action string `json:"action"`
	// Tool is the tool acted on; By who acted; At when.
	Tool string    `json:"tool"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
	// Until is a pause's end (zero: until resumed).
	Until time.Time `json:"until,omitzero"`
	// Detail says what the action bore on (a dead letter's task, the
	// filter of a cancel).
	Detail string `json:"detail,omitempty"`
}

// audit stores r before its action is taken.
func (c *Control) audit(ctx context.Context, r Record) error {
	if err := c.ensure(ctx); err != nil {
		return err
	}
	if strings.TrimSpace(r.By) == "" {
		return ErrNoBy
	}
	if err := tool.ValidateName(r.Tool); err != nil {
		return fmt.Errorf("toolctl: %w", err)
	}
	r.At = time.Now().UTC()
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("toolctl: audit record: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
	defer cancel()
	if _, err := c.js.Publish(pctx, natsjs.AuditSubject(c.cfg.Provision.Prefix, r.Tool), data); err != nil {
		return fmt.Errorf("toolctl: the %s of tool %s not audited, so not taken: %w", r.Action, r.Tool, err)
	}
	return nil
}

// Pause holds every new call of toolName on every worker replica until
// until (zero: until resumed): delivered calls wait in the tool's queue,
// reported queued; calls running go on.
func (c *Control) Pause(ctx context.Context, toolName string, until time.Time, by string) error {
	if !until.IsZero() && !until.After(time.Now()) {
		return fmt.Errorf("toolctl: pause until %s: that is past", until.Format(time.RFC3339))
	}
	if err := c.audit(ctx, Record{Action: "pause", Tool: toolName, By: by, Until: until}); err != nil {
		return err
	}
	_, err := c.state.Update(ctx, toolName, func(st *limits.State) error {
		st.Pause = &limits.Pause{Until: until.UTC(), By: by, At: time.Now().UTC()}
		return nil
	})
	return err
}

// Resume ends the pause of toolName: its queued calls start as their
// limits allow.
func (c *Control) Resume(ctx context.Context, toolName, by string) error {
	if err := c.audit(ctx, Record{Action: "resume", Tool: toolName, By: by}); err != nil {
		return err
	}
	_, err := c.state.Update(ctx, toolName, func(st *limits.State) error {
		if st.Pause == nil {
			return toolstate.ErrNoChange
		}
		st.Pause = nil
		return nil
	})
	return err
}
