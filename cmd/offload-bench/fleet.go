package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// fleetReplicas is how many worker replicas share each limit of the
// fleet figures (SPEC §19: "across 3 replicas").
const fleetReplicas = 3

// fleetFigures are the behaviour figures of fleet control (SPEC §19),
// each measured across fleetReplicas worker replicas in this process:
// the measured rate against the limit, the most calls of one tenant ever
// seen running at once against its max_in_flight, and the median queue
// wait of a tenant with another flooding 10× against its wait alone.
type fleetFigures struct {
	rateLimit, rateMeasured float64 // calls a second
	rateWindow              time.Duration
	rateOffered             int
	keyedMost               map[string]int
	keyedCalls              int
	aloneP50, floodedP50    time.Duration
	fairCalls, floodCalls   int
}

// fleetTool is a tool named name, of limits l, taking takes, that records
// when each call starts and, by the tenant its worker was given, how many
// run at once.
type fleetTool struct {
	mu      sync.Mutex
	starts  map[string]time.Time // task ID → start
	running map[string]int
	most    map[string]int
	first   chan struct{} // closed at the first start
	once    sync.Once
}

func newFleetTool() *fleetTool {
	return &fleetTool{starts: map[string]time.Time{}, running: map[string]int{}, most: map[string]int{}, first: make(chan struct{})}
}

func (f *fleetTool) tool(name string, l *limits.Limits, takes time.Duration) *tool.Tool {
	t := tool.Func(name, "A tool under fleet control.", func(ctx context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		f.mu.Lock()
		f.starts[rc.TaskID] = time.Now()
		f.running[rc.Tenant]++
		f.most[rc.Tenant] = max(f.most[rc.Tenant], f.running[rc.Tenant])
		f.mu.Unlock()
		f.once.Do(func() { close(f.first) })
		defer func() {
			f.mu.Lock()
			f.running[rc.Tenant]--
			f.mu.Unlock()
		}()
		if takes > 0 {
			t := time.NewTimer(takes)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "ok", nil
	}, tool.Idempotent())
	t.Limits = l
	return t
}

// offer dispatches n calls of toolName for tenant at once and returns,
// once each has its result, when each was offered, by task ID.
func offer(ctx context.Context, s *offloadSystem, toolName, tenant string, n int) (map[string]time.Time, error) {
	offered := make(map[string]time.Time, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		task := protocol.Task{TaskID: protocol.NewID(), Tool: toolName, Args: []byte(`{}`), ConversationID: s.conv,
			ToolCallID: "call_" + protocol.NewID(), Tenant: tenant}
		offered[task.TaskID] = time.Now()
		wg.Go(func() {
			res, err := s.disp.Call(ctx, task)
			if err == nil && res.Status != protocol.StatusOK {
				err = fmt.Errorf("task %s: %s %s", task.TaskID, res.Status, res.ErrorType)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return offered, errors.Join(all...)
}

// withFleet starts fleetReplicas workers of slots each serving t on s,
// runs fn and stops them.
func withFleet(ctx context.Context, s *offloadSystem, ep endpoint, slots int, t *tool.Tool, fn func() error) error {
	ws, err := startBenchWorkers(ctx, ep, fleetReplicas, slots, workerOpts{served: t, prefix: s.prefix}, nil)
	defer stopBenchWorkers(ctx, ws)
	if err != nil {
		return err
	}
	if err := waitRemote(ctx, s, t.Name); err != nil {
		return err
	}
	return fn()
}

// waitRemote waits until the registry shows tool name to s's agent side.
func waitRemote(ctx context.Context, s *offloadSystem, name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		tools, _ := s.remote.Tools(ctx)
		if slices.ContainsFunc(tools, func(t *tool.Tool) bool { return t.Name == name }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tool %s never appeared in the registry", name)
		}
		select {
		case <-s.remote.Changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// measureFleet measures the fleet figures on s (its dispatcher; workers of
// its own): rate, then per-key concurrency, then fairness.
func measureFleet(ctx context.Context, s *offloadSystem, ep endpoint, c config) (fleetFigures, error) {
	var f fleetFigures
	// Rate: offered at once, 1.5 windows' worth; the starts within the
	// window from the first, as the tool saw them, against the limit.
	f.rateLimit, f.rateWindow = c.fleetRate, c.fleetWindow
	f.rateOffered = int(f.rateLimit*f.rateWindow.Seconds()*1.5) + 1
	paced := newFleetTool()
	period := time.Duration(float64(time.Second) / f.rateLimit)
	rate := &limits.Limits{Rate: &limits.Rate{Limit: 1, Period: limits.Duration(period)}}
	if err := withFleet(ctx, s, ep, 4, paced.tool("fleet_paced", rate, 0), func() error {
		_, err := offer(ctx, s, "fleet_paced", "", f.rateOffered)
		return err
	}); err != nil {
		return f, fmt.Errorf("rate: %w", err)
	}
	starts := make([]time.Time, 0, len(paced.starts))
	for _, at := range paced.starts {
		starts = append(starts, at)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	n := 0
	for _, at := range starts {
		if at.Sub(starts[0]) < f.rateWindow {
			n++
		}
	}
	f.rateMeasured = float64(n) / f.rateWindow.Seconds()

	// Per-key concurrency: 40 calls of two tenants, max_in_flight 2 per
	// tenant, each call 20 ms; the tool checks at every start.
	keyed := newFleetTool()
	perTenant := &limits.Limits{MaxInFlight: 2, Key: limits.KeyTenant}
	f.keyedCalls = 40
	if err := withFleet(ctx, s, ep, 4, keyed.tool("fleet_keyed", perTenant, 20*time.Millisecond), func() error {
		errs := make(chan error, 2)
		for _, tenant := range []string{"acme", "globex"} {
			go func() { _, err := offer(ctx, s, "fleet_keyed", tenant, f.keyedCalls/2); errs <- err }()
		}
		return errors.Join(<-errs, <-errs)
	}); err != nil {
		return f, fmt.Errorf("per-key concurrency: %w", err)
	}
	f.keyedMost = keyed.most

	// Fairness: tenant b's 10 calls alone, then with tenant a's 100
	// offered just before them; max_in_flight 2 per tenant, fairness by
	// tenant, each call 20 ms; the queue wait of a call is from its offer
	// to its start.
	f.fairCalls, f.floodCalls = 10, 100
	fair := &limits.Limits{MaxInFlight: 2, Key: limits.KeyTenant, Fairness: &limits.Fairness{Key: limits.KeyTenant}}
	waits := func(ft *fleetTool, offered map[string]time.Time) time.Duration {
		var d []time.Duration
		for id, at := range offered {
			d = append(d, ft.starts[id].Sub(at))
		}
		return percentiles(d).p50
	}
	alone := newFleetTool()
	if err := withFleet(ctx, s, ep, 4, alone.tool("fleet_fair", fair, 20*time.Millisecond), func() error {
		offered, err := offer(ctx, s, "fleet_fair", "b", f.fairCalls)
		f.aloneP50 = waits(alone, offered)
		return err
	}); err != nil {
		return f, fmt.Errorf("fairness alone: %w", err)
	}
	flooded := newFleetTool()
	if err := withFleet(ctx, s, ep, 4, flooded.tool("fleet_fair2", fair, 20*time.Millisecond), func() error {
		flood := make(chan error, 1)
		go func() { _, err := offer(ctx, s, "fleet_fair2", "a", f.floodCalls); flood <- err }()
		// a's calls first: b's are offered once one of a's started (the
		// rest are queued by then, or on their way).
		select {
		case <-flooded.first:
		case <-ctx.Done():
			return ctx.Err()
		}
		offered, err := offer(ctx, s, "fleet_fair2", "b", f.fairCalls)
		f.floodedP50 = waits(flooded, offered)
		return errors.Join(err, <-flood)
	}); err != nil {
		return f, fmt.Errorf("fairness flooded: %w", err)
	}
	return f, nil
}

// reportFleet prints the fleet figures against their targets (SPEC §19).
func reportFleet(out io.Writer, f fleetFigures) []bool {
	fmt.Fprintf(out, "Fleet control's behaviour (SPEC §19), across %d worker replicas of 4 slots in this process, one dispatcher\n", fleetReplicas)
	fmt.Fprintf(out, "- rate: a limit of %.1f/s (GCRA, burst 1), %d calls offered at once; starts within %v of the first, as the tool saw them: %.2f/s\n",
		f.rateLimit, f.rateOffered, f.rateWindow, f.rateMeasured)
	fmt.Fprintf(out, "- per-key concurrency: max_in_flight 2 per tenant, %d calls of 20 ms from two tenants at once; most running at once, checked at every start: %v\n",
		f.keyedCalls, f.keyedMost)
	fmt.Fprintf(out, "- fairness: max_in_flight 2 per tenant, fairness by tenant, calls of 20 ms; tenant b's %d calls offered at once, alone then just after tenant a's %d: median queue wait %v alone, %v flooded\n",
		f.fairCalls, f.floodCalls, f.aloneP50.Round(time.Microsecond), f.floodedP50.Round(time.Microsecond))
	most := 0
	for _, n := range f.keyedMost {
		most = max(most, n)
	}
	results := []bool{
		verdict(out, "measured rate / limit (within ±5 %: ≥ 0.95)", f.rateMeasured/f.rateLimit, "≥", 0.95),
		verdict(out, "measured rate / limit (within ±5 %: ≤ 1.05)", f.rateMeasured/f.rateLimit, "≤", 1.05),
		verdictIn(out, "most calls of one tenant running at once (max_in_flight 2)", float64(most), "calls", "≤", 2),
		verdict(out, "tenant b's median queue wait flooded / alone", float64(f.floodedP50)/float64(f.aloneP50), "≤", 1.5),
	}
	fmt.Fprintln(out)
	return results
}
