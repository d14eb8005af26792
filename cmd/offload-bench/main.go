// Command offload-bench measures offload against baselines in the same run
// (SPEC §8) and prints every figure as a ratio to its baseline, with its
// target and whether it is met:
//
//   - round trip of a tool call through JetStream (dispatch → worker →
//     result → back in the caller), p50 and p99, against the fastest
//     idiomatic raw nats.go program doing the same publish/consume/publish
//     (batched pulls), with the one-at-a-time raw pattern and the
//     in-process executor beside it; and the round trip of a background
//     call through the agent loop (dispatch → worker → result → injected as
//     a follow-up), with the same run on the in-process executor beside it
//     (the agent loop's own part);
//   - throughput with 1, 2 and 4 worker replicas of 16 slots, and the
//     scaling from 1 to 4 replicas of 1 slot, against the raw baseline;
//   - the effect ledger's cost (SPEC §13): the worker path of a tool not
//     declared idempotent against the same tool declared idempotent, a
//     no-op and a tool taking 2 ms, throughput and p50, with the stored
//     writes and the CPU per call of each process (effects.go);
//   - fleet control's cost on a tool without limits (SPEC §19): the same
//     path with the limits enabled against worker.Config.NoLimits; and its
//     behaviour across 3 worker replicas (fleet.go): a rate's accuracy
//     (-fleet-rate over -fleet-window, a shorter window at a higher rate
//     than the spec's 30/min over a minute, which those flags give), the
//     most calls of a tenant running at once under max_in_flight 2 per
//     tenant, and a tenant's median queue wait with another flooding 10×
//     against alone;
//   - overlap: 20 background calls of 500 ms on 20 worker slots through the
//     agent loop, against the ideal (500 ms plus the model's time);
//   - the cost of tracing: offload inline traced (at
//     parentbased_traceidratio 0.1 and at always_on, exported over
//     OTLP/HTTP to a receiver in a child process) against untraced, round
//     trip, throughput and CPU per call of each process (tracing.go);
//   - the agent's memory per pending background call at 10 000 pending,
//     and the dispatcher's memory per finished call it remembers;
//   - the process's RSS and live heap over a run of 1 000 000 calls
//     (-long), through the raw baseline and then offload, sampled every
//     tenth: offload's RSS must stay flat (grow at most 4 B per call
//     faster than the baseline's) although its dispatcher remembers the
//     calls of the last 10 minutes;
//   - with it, the side by side in long rounds (side.go): offload against
//     raw nats.go at 1, 2 and 4 replicas, every round printed, the targets
//     held in every round.
//
// offload's tool has the default tool options everywhere (not declared
// idempotent: its workers keep the effect ledger, one stored write per
// call), but in the ledger's section, which sets it against the same tool
// declared idempotent.
//
// The agent and worker sides run in this process, against the embedded
// nats-server (file storage, loopback) run in a child process, so that the
// memory figures are the agent's and workers' only; the machine's cores
// are shared by server, workers and caller, so compare the ratios, not the
// absolute figures. The calls carry
// about 200 bytes of arguments and return about 200 bytes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/natsjs"
)

type config struct {
	// fleetRate and fleetWindow are the rate figure's limit (calls a
	// second) and window (SPEC §19 says 30/min over a minute: -fleet-rate
	// 0.5 -fleet-window 1m).
	fleetRate                      float64
	fleetWindow                    time.Duration
	n, warmup, tn, inflight, slots int
	tpRounds                       int
	replicas                       []int
	pending, finished              int
	long                           int
	longN, longRounds              int
	skipOverlap                    bool
	only                           string
	memprofile                     string
	// agent serve's figures (serve.go): wakes measured, conversations
	// approved at once, paused conversations for the memory figure.
	serveWakes, serveApprove, servePaused int
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 2000, "round trips measured for latency")
	flag.Float64Var(&c.fleetRate, "fleet-rate", 5, "fleet control's rate figure: the limit, calls a second (SPEC §19's 30/min over a minute: -fleet-rate 0.5 -fleet-window 1m)")
	flag.DurationVar(&c.fleetWindow, "fleet-window", 6*time.Second, "fleet control's rate figure: the window the starts are counted over")
	flag.IntVar(&c.warmup, "warmup", 200, "round trips before measuring")
	flag.IntVar(&c.tn, "throughput-n", 5000, "calls per throughput round")
	flag.IntVar(&c.tpRounds, "throughput-rounds", 6, "interleaved rounds of each throughput and scaling figure")
	flag.IntVar(&c.inflight, "inflight", 64, "calls in flight in throughput runs")
	flag.IntVar(&c.slots, "slots", 16, "concurrent tasks per worker replica")
	flag.IntVar(&c.pending, "pending", 10_000, "pending background calls for the memory figure")
	flag.IntVar(&c.finished, "finished", 50_000, "calls for the memory per finished call")
	flag.IntVar(&c.long, "long", 1_000_000, "calls of the long run through the baseline and offload, RSS sampled every tenth (0 skips it, and the side by side in long rounds)")
	flag.IntVar(&c.longN, "long-n", 30_000, "calls per round of the side by side in long rounds")
	flag.IntVar(&c.longRounds, "long-rounds", 3, "rounds of the side by side in long rounds")
	flag.BoolVar(&c.skipOverlap, "skip-overlap", false, "skip the overlap and memory figures")
	flag.StringVar(&c.only, "only", "", "run one figure alone, for profiling: a system's throughput (raw, next, offload or offload-idempotent; 1 replica, -throughput-n calls), the memory per pending background call (pending), the tracing cost (tracing), agent serve's figures (serve), the effect ledger's section (ledger), the side by side in long rounds (side), the MCP tools' section (mcp), the cost of fleet control on a tool without limits (limits), or the first page of the pending calls with 10 000 pending against 10 (pages)")
	flag.IntVar(&c.serveWakes, "serve-wakes", 200, "agent serve: wakes measured for the wake latency (0 skips agent serve's figures)")
	flag.IntVar(&c.serveApprove, "serve-approve", 1000, "agent serve: paused conversations approved at once, continued by 2 replicas")
	flag.IntVar(&c.servePaused, "serve-paused", 10_000, "agent serve: paused conversations in the store for the replica's memory")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&c.memprofile, "memprofile", "", "write an allocation profile at the end of the run to this file")
	serveStore := flag.String("serve", "", "internal: run the embedded server for this store until stdin closes")
	otlpReceive := flag.Bool("otlp-receive", false, "internal: run the tracing section's OTLP receiver until stdin closes")
	benchWorker := flag.String("bench-worker", "", "internal: run bench workers for the server at this URL, as stdin says")
	benchWorkerNkey := flag.String("bench-worker-nkey", "", "internal: the seed file of -bench-worker's user")
	flag.Parse()
	if *benchWorker != "" {
		if err := serveWorkers(*benchWorker, *benchWorkerNkey); err != nil {
			fmt.Fprintln(os.Stderr, "offload-bench workers:", err)
			os.Exit(1)
		}
		return
	}
	if *otlpReceive {
		if err := receive(); err != nil {
			fmt.Fprintln(os.Stderr, "offload-bench receiver:", err)
			os.Exit(1)
		}
		return
	}
	if *serveStore != "" {
		if err := serve(*serveStore); err != nil {
			fmt.Fprintln(os.Stderr, "offload-bench server:", err)
			os.Exit(1)
		}
		return
	}
	if c.memprofile != "" {
		runtime.MemProfileRate = 4096 // fine enough to see small retained objects
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "offload-bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	c.replicas = []int{1, 2, 4}
	err := run(context.Background(), c, os.Stdout)
	if err == nil && c.memprofile != "" && c.only == "" {
		err = writeMemProfile(c.memprofile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "offload-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// caller makes one call and returns when its result is back. It returns
// the duration to count, or zero to count its wall time.
type caller func(ctx context.Context) (time.Duration, error)

// wall makes a caller of f, timed by its wall time.
func wall(f func(ctx context.Context) error) caller {
	return func(ctx context.Context) (time.Duration, error) { return 0, f(ctx) }
}

type latency struct{ p50, p99 time.Duration }

// samples returns the durations of n sequential calls.
func samples(ctx context.Context, call caller, n int) ([]time.Duration, error) {
	d := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		own, err := call(ctx)
		if err != nil {
			return nil, err
		}
		d[i] = time.Since(start)
		if own > 0 {
			d[i] = own
		}
	}
	return d, nil
}

func percentiles(d []time.Duration) latency {
	d = slices.Clone(d)
	slices.Sort(d)
	return latency{p50: d[len(d)/2], p99: d[len(d)*99/100]}
}

// measureLatencies measures each caller over n[i] sequential calls after
// warmup, in interleaved rounds so that drift on a shared machine affects
// every system alike.
func measureLatencies(ctx context.Context, calls []caller, n []int, warmup, rounds int) ([]latency, error) {
	all := make([][]time.Duration, len(calls))
	for i, call := range calls {
		if _, err := samples(ctx, call, min(warmup, n[i])); err != nil {
			return nil, err
		}
	}
	for range rounds {
		for i, call := range calls {
			d, err := samples(ctx, call, max(n[i]/rounds, 1))
			if err != nil {
				return nil, err
			}
			all[i] = append(all[i], d...)
		}
	}
	out := make([]latency, len(calls))
	for i := range all {
		out[i] = percentiles(all[i])
	}
	return out, nil
}

// verdict prints a target line: the figure, the target and met / not met.
func verdict(out io.Writer, what string, got float64, op string, target float64) bool {
	return verdictIn(out, what, got, "×", op, target)
}

// verdictIn is verdict for a figure in unit (a ratio's is ×).
func verdictIn(out io.Writer, what string, got float64, unit, op string, target float64) bool {
	ok := got <= target
	if op == "≥" {
		ok = got >= target
	}
	if unit != "×" {
		unit = " " + unit
	}
	fmt.Fprintf(out, "- %s: %.2f%s (target %s %.2f%s) — %s\n", what, got, unit, op, target, unit, metOrNot(ok))
	return ok
}

func run(ctx context.Context, c config, out io.Writer) error {
	dir, err := os.MkdirTemp("", "offload-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	proc, err := startServer(ctx, dir)
	if err != nil {
		return err
	}
	defer proc.stop()
	ep := endpoint{url: proc.srv.URL(), nkey: proc.srv.NkeySeedFile()}

	raw, err := newRawSystem(ctx, ep, "rawb", rawBatched)
	if err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	defer raw.close()
	rawNx, err := newRawSystem(ctx, ep, "rawn", rawNext)
	if err != nil {
		return fmt.Errorf("raw one-at-a-time: %w", err)
	}
	defer rawNx.close()
	off, err := newOffloadSystem(ctx, ep)
	if err != nil {
		return fmt.Errorf("offload: %w", err)
	}
	defer off.close()

	rawS, rawNS, offS := rawSys{raw, ep}, rawSys{rawNx, ep}, offSys{off, ep}
	if c.only == "pending" {
		pm, err := measurePendingMemory(ctx, ep, c.pending)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "pending: %d calls, heap %d B, stacks %d B per call\n", pm.calls, pm.heap/uint64(pm.calls), pm.stack/uint64(pm.calls)) //nolint:gosec // G115: a count of calls, positive
		if c.memprofile != "" {
			return writeMemProfile(c.memprofile)
		}
		return nil
	}
	if c.only == "tracing" {
		_, err := tracingCost(ctx, c, ep, proc, off, out)
		if err == nil && c.memprofile != "" {
			err = writeMemProfile(c.memprofile)
		}
		return err
	}
	if c.only == "serve" {
		_, err := measureServe(ctx, dir, out, c.serveWakes, c.serveApprove, c.servePaused)
		return err
	}
	if c.only == "limits" {
		mtp, mlats, err := measureLimitsCost(ctx, off, ep, c, proc)
		if err != nil {
			return fmt.Errorf("limits' cost: %w", err)
		}
		reportLimitsCost(out, c, mtp, mlats)
		ff, err := measureFleet(ctx, off, ep, c)
		if err != nil {
			return fmt.Errorf("fleet control: %w", err)
		}
		reportFleet(out, ff)
		return nil
	}
	if c.only == "ledger" {
		figs, err := measureLedger(ctx, off, ep, c, proc)
		if err != nil {
			return fmt.Errorf("effect ledger: %w", err)
		}
		reportLedger(out, c, figs)
		return nil
	}
	if c.only == "mcp" {
		_, err := measureMCP(ctx, ep, c, proc, out)
		return err
	}
	if c.only == "pages" {
		f, err := measurePages(ctx, ep)
		if err != nil {
			return fmt.Errorf("paged views: %w", err)
		}
		reportPages(out, f)
		return nil
	}
	if c.only == "side" {
		_, err := sideBySide(ctx, c, rawS, offS, proc, out)
		return err
	}
	if c.only != "" {
		s := map[string]system{"raw": rawS, "next": rawNS, "offload": offS, "offload-idempotent": offIdemSys{off, ep}}[c.only]
		if s == nil {
			return fmt.Errorf("-only %q: want raw, next, offload, offload-idempotent, pending, tracing, serve, ledger, side, mcp, limits or pages", c.only)
		}
		tp, err := throughputs(ctx, []system{s}, 1, c.slots, c.tn, c.inflight, 1, proc)
		if err != nil {
			return err
		}
		pc, sc := tp.cpuPerCall(0)
		fmt.Fprintf(out, "%s: %.0f calls/s, CPU per call %s here + %s in the server (live heap after: %.1f MiB)\n",
			c.only, tp.rate(0), pc.Round(100*time.Nanosecond), sc.Round(100*time.Nanosecond), float64(heapAfterGC())/(1<<20))
		if c.memprofile != "" { // while the system is alive
			return writeMemProfile(c.memprofile)
		}
		return nil
	}

	fmt.Fprintf(out, "offload-bench: embedded nats-server (file storage) in a child process, loopback, %d CPUs; calls of ~200 B arguments and ~200 B results\n", runtime.NumCPU())
	fmt.Fprintf(out, "latency n=%d (warm-up %d, 10 interleaved rounds); throughput n=%d per round (%d interleaved rounds), %d in flight\n", c.n, c.warmup, c.tn, c.tpRounds, c.inflight)
	fmt.Fprintln(out, "Baseline: raw nats.go, Consumer.Messages with PullMaxMessages = slots (batched pulls), result published with Nats-Msg-Id, PubAck awaited, then ack;")
	fmt.Fprintln(out, "where the one-at-a-time pattern (Consumer.Next per slot) measures faster, that is the baseline")
	fmt.Fprintln(out, "offload's tool, lookup, has the default tool options: not declared idempotent, so its workers write an effect-ledger entry before each run (SPEC §13); the ledger's section sets it against the same tool declared idempotent")
	fmt.Fprintln(out)
	var results []bool

	// Latency: one replica with one slot each, one call in flight, the
	// systems measured in alternating rounds.
	for _, s := range []system{rawS, rawNS, offS} {
		if err := s.start(ctx, 1, 1); err != nil {
			return err
		}
	}
	bg, err := off.backgroundCaller()
	if err != nil {
		return err
	}
	bgLoop, err := backgroundLoopCaller()
	if err != nil {
		return err
	}
	bgN := max(c.n/4, 10) // an agent run per sample
	lats, err := measureLatencies(ctx, []caller{rawS.call, rawNS.call, offS.call, bg, inProcessCall(), bgLoop},
		[]int{c.n, c.n, c.n, bgN, c.n, bgN}, c.warmup, 10)
	for _, s := range []system{rawS, rawNS, offS} {
		s.stop(ctx)
	}
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	// The baseline is the faster raw pattern at each figure.
	base := lats[0]
	if lats[1].p50 < base.p50 {
		base.p50 = lats[1].p50
	}
	if lats[1].p99 < base.p99 {
		base.p99 = lats[1].p99
	}
	fmt.Fprintln(out, "Round trip of a tool call (1 replica, 1 slot, 1 call in flight)")
	fmt.Fprintln(out, "Baseline: the faster raw pattern at each percentile")
	fmt.Fprintln(out, "| system | n | p50 | p99 | p50 / baseline | p99 / baseline |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- | --- |")
	for i, name := range []string{
		"raw nats.go, batched pulls",
		"raw nats.go, one at a time (Consumer.Next)",
		"offload inline (Toolset → Dispatcher → Worker → back)",
		"offload background (agent loop: dispatch → worker → result → follow-up)",
		"in-process executor",
		"background, in-process executor: agent loop alone",
	} {
		l := lats[i]
		n := c.n
		if i == 3 || i == 5 {
			n = bgN
		}
		fmt.Fprintf(out, "| %s | %d | %s | %s | %.2f× | %.2f× |\n", name, n, l.p50.Round(time.Microsecond), l.p99.Round(time.Microsecond),
			float64(l.p50)/float64(base.p50), float64(l.p99)/float64(base.p99))
	}
	fmt.Fprintln(out)
	results = append(results,
		verdict(out, "offload inline p50 / baseline", float64(lats[2].p50)/float64(base.p50), "≤", 1.3),
		verdict(out, "offload background p50 / baseline", float64(lats[3].p50)/float64(base.p50), "≤", 1.3))
	fmt.Fprintln(out)

	fmt.Fprintf(out, "Throughput (%d calls in flight, %d slots per replica; medians over the rounds)\n", c.inflight, c.slots)
	fmt.Fprintln(out, "Baseline: the faster raw pattern in the same round; the ratio is the median over the rounds of offload / baseline")
	fmt.Fprintln(out, "| replicas | batched pulls calls/s | one at a time calls/s | offload calls/s | one at a time / batched | offload / baseline |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- | --- |")
	tpNames := []string{"batched pulls", "one at a time", "offload"}
	var tpRuns []tpRun
	for _, r := range c.replicas {
		tp, err := throughputs(ctx, []system{rawS, rawNS, offS}, r, c.slots, c.tn, c.inflight, c.tpRounds, proc)
		if err != nil {
			return fmt.Errorf("throughput: %w", err)
		}
		tpRuns = append(tpRuns, tp)
		fmt.Fprintf(out, "| %d | %.0f | %.0f | %.0f | %.2f× | %.2f× |\n", r, tp.rate(0), tp.rate(1), tp.rate(2), tp.ratio(1, 0), tp.ratio(2, 0, 1))
	}
	fmt.Fprintln(out)
	for i, r := range c.replicas {
		printStalls(out, fmt.Sprintf("%d replica(s)", r), tpRuns[i], tpNames...)
	}
	for i, r := range c.replicas {
		results = append(results, verdict(out, fmt.Sprintf("offload throughput / baseline, %d replica(s)", r), tpRuns[i].ratio(2, 0, 1), "≥", 0.8))
	}
	fmt.Fprintln(out)
	printCPU(out, c.replicas, tpRuns)

	fmt.Fprintf(out, "Scaling with 1-slot replicas (%d calls in flight; medians over the rounds)\n", c.inflight)
	fmt.Fprintln(out, "| system | 1 × 1 calls/s | 4 × 1 calls/s | scaling 1 → 4 |")
	fmt.Fprintln(out, "| --- | --- | --- | --- |")
	one, err := throughputs(ctx, []system{rawS, offS}, 1, 1, c.tn/2, c.inflight, c.tpRounds, proc)
	if err != nil {
		return fmt.Errorf("scaling: %w", err)
	}
	four, err := throughputs(ctx, []system{rawS, offS}, 4, 1, c.tn/2, c.inflight, c.tpRounds, proc)
	if err != nil {
		return fmt.Errorf("scaling: %w", err)
	}
	rawScale, offScale := four.rate(0)/one.rate(0), four.rate(1)/one.rate(1)
	fmt.Fprintf(out, "| raw nats.go, batched pulls (baseline) | %.0f | %.0f | %.2f× |\n", one.rate(0), four.rate(0), rawScale)
	fmt.Fprintf(out, "| offload | %.0f | %.0f | %.2f× |\n", one.rate(1), four.rate(1), offScale)
	fmt.Fprintln(out)
	printStalls(out, "1 × 1", one, "batched pulls", "offload")
	printStalls(out, "4 × 1", four, "batched pulls", "offload")
	results = append(results, verdict(out, "offload scaling / baseline scaling", offScale/rawScale, "≥", 0.8))
	fmt.Fprintln(out)

	tr, err := tracingCost(ctx, c, ep, proc, off, out)
	if err != nil {
		return fmt.Errorf("tracing cost: %w", err)
	}
	results = append(results, tr...)
	fmt.Fprintln(out)
	figs, err := measureLedger(ctx, off, ep, c, proc)
	if err != nil {
		return fmt.Errorf("effect ledger: %w", err)
	}
	results = append(results, reportLedger(out, c, figs)...)
	if _, err := measureMCP(ctx, ep, c, proc, out); err != nil {
		return fmt.Errorf("MCP tools: %w", err)
	}
	mtp, mlats, err := measureLimitsCost(ctx, off, ep, c, proc)
	if err != nil {
		return fmt.Errorf("limits' cost: %w", err)
	}
	results = append(results, reportLimitsCost(out, c, mtp, mlats)...)
	ff, err := measureFleet(ctx, off, ep, c)
	if err != nil {
		return fmt.Errorf("fleet control: %w", err)
	}
	results = append(results, reportFleet(out, ff)...)

	pf, err := measurePages(ctx, ep)
	if err != nil {
		return fmt.Errorf("paged views: %w", err)
	}
	results = append(results, reportPages(out, pf)...)

	// Memory per finished call: interleaved like the rest, raw first.
	// A dispatcher of its own, so that its memory of the calls made so far
	// in this run does not hide the growth.
	fresh, err := newOffloadSystem(ctx, ep)
	if err != nil {
		return err
	}
	defer fresh.close()
	var grow [2]uint64
	for i, s := range []system{rawS, offSys{fresh, ep}} {
		if grow[i], err = measureFinishedMemory(ctx, s, c.finished, c.inflight, c.slots); err != nil {
			return fmt.Errorf("finished memory: %w", err)
		}
	}
	perRaw, perFinished := float64(grow[0])/float64(c.finished), float64(grow[1])/float64(c.finished)
	fmt.Fprintf(out, "Memory per finished call (%d calls, live heap growth of the agent and worker process after a GC): baseline %.1f B, offload %.1f B (the dispatcher remembers the last 65 536 calls exactly, for 10 min at most)\n", c.finished, perRaw, perFinished)
	results = append(results, verdict(out, "offload bytes per finished call / 64 B", perFinished/64, "≤", 1))
	fmt.Fprintln(out)

	if !c.skipOverlap {
		// Overlap: background calls run side by side while the agent waits.
		const calls, work = 20, 500 * time.Millisecond
		ov, err := measureOverlap(ctx, ep, calls, calls, 3, work)
		if err != nil {
			return fmt.Errorf("overlap: %w", err)
		}
		ratio := ov.ratio(work)
		fmt.Fprintf(out, "Overlap: %d background calls of %s, 1 replica with %d slots, through the agent loop (median of 3 runs)\n", calls, work, calls)
		fmt.Fprintln(out, "| run | model time | ideal (work + model) | run / ideal |")
		fmt.Fprintln(out, "| --- | --- | --- | --- |")
		fmt.Fprintf(out, "| %s | %s | %s | %.3f× |\n\n", ov.elapsed.Round(time.Millisecond), ov.model.Round(time.Microsecond), (work + ov.model).Round(time.Millisecond), ratio)
		results = append(results, verdict(out, "overlap run / ideal", ratio, "≤", 1.15))
		fmt.Fprintln(out)

		pm, err := measurePendingMemory(ctx, ep, c.pending)
		if err != nil {
			return fmt.Errorf("pending memory: %w", err)
		}
		heapPer := float64(pm.heap) / float64(pm.calls)
		fmt.Fprintf(out, "Agent memory per pending background call (%d pending, through the agent loop): heap %.0f B, goroutine stacks %.0f B\n",
			pm.calls, heapPer, float64(pm.stack)/float64(pm.calls))
		results = append(results, verdict(out, "heap per pending call / 4 KiB", heapPer/4096, "≤", 1))
		fmt.Fprintln(out)
	}

	if c.serveWakes > 0 {
		sr, err := measureServe(ctx, dir, out, c.serveWakes, c.serveApprove, c.servePaused)
		if err != nil {
			return fmt.Errorf("agent serve: %w", err)
		}
		results = append(results, sr...)
		fmt.Fprintln(out)
	}

	if c.long > 0 && c.longRounds > 0 {
		sr, err := sideBySide(ctx, c, rawS, offS, proc, out)
		if err != nil {
			return fmt.Errorf("side by side: %w", err)
		}
		results = append(results, sr...)
		fmt.Fprintln(out)
	}

	if c.long > 0 {
		// The baseline first, then offload with a dispatcher of its own
		// (which remembers none of this run's earlier calls).
		step := max(c.long/10, 1)
		rawLong, err := measureLong(ctx, rawS, c.long, step, c.inflight, c.slots)
		if err != nil {
			return fmt.Errorf("long run, baseline: %w", err)
		}
		long, err := newOffloadSystem(ctx, ep)
		if err != nil {
			return err
		}
		defer long.close()
		offLong, err := measureLong(ctx, offSys{long, ep}, c.long, step, c.inflight, c.slots)
		if err != nil {
			return fmt.Errorf("long run, offload: %w", err)
		}
		results = append(results, reportLong(out, rawLong, offLong, c.inflight, c.slots))
		fmt.Fprintln(out)
	}

	met := 0
	for _, ok := range results {
		if ok {
			met++
		}
	}
	fmt.Fprintf(out, "Targets met: %d of %d\n", met, len(results))
	return nil
}

// writeMemProfile writes the heap profile (live objects after a GC, and
// every allocation of the run) to path.
func writeMemProfile(path string) error {
	runtime.GC()
	runtime.GC() // the profile is as of the last completed cycle but one
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// endpoint is the server the bench connects to, with its credentials.
type endpoint struct{ url, nkey string }

func (e endpoint) connect(name string) (*nats.Conn, error) {
	return natsjs.Connect(e.url, natsjs.ConnectOptions{Name: name, Nkey: e.nkey})
}
