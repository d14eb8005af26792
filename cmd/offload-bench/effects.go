package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// The effect ledger's cost (SPEC §13, §8 as amended by issue 40): the
// worker path of a tool not declared idempotent (the default: its workers
// create a ledger entry before each run) against the same tool declared
// idempotent (no entry), (a) a no-op and (b) a tool that takes 2 ms (the
// fastest real side effect, a local database write). The workers run in a
// child process (workerproc.go), so that the CPU per call is measured in
// each process: this one (the agent side), the server's and the workers'.

// ledgerTakes is how long the tool of the ledger's second figure takes.
const ledgerTakes = 2 * time.Millisecond

// ledgerTurnWarmup is how many calls each latency turn makes before it
// measures: its workers were just started.
const ledgerTurnWarmup = 50

// ledgerFigure is what the section measured for one tool: throughput with
// the ledger (system 0) and without it (system 1, the tool declared
// idempotent), and the round trip of each.
type ledgerFigure struct {
	takes time.Duration
	tp    tpRun
	lats  [2]latency
}

// measureLedger measures the ledger's two figures, each system on workers
// of its own in one child process: throughput with one replica of c.slots
// slots, and the round trip's p50 and p99 with one replica of one slot and
// one call in flight, the two taking turns (the one that starts a round
// rotates).
func measureLedger(ctx context.Context, off *offloadSystem, ep endpoint, c config, srv *serverProcess) ([]ledgerFigure, error) {
	wp, err := startWorkerProcess(ctx, ep)
	if err != nil {
		return nil, fmt.Errorf("worker process: %w", err)
	}
	defer wp.close()
	var out []ledgerFigure
	for _, takes := range []time.Duration{0, ledgerTakes} {
		systems := []system{
			childSys{s: off, wp: wp, o: workerOpts{takes: takes}},
			childSys{s: off, wp: wp, o: workerOpts{idempotent: true, takes: takes}},
		}
		tp, err := throughputs(ctx, systems, 1, c.slots, c.tn, c.inflight, c.tpRounds, srv)
		if err != nil {
			return nil, err
		}
		lats, err := alternatingLatencies(ctx, systems, c.n)
		if err != nil {
			return nil, err
		}
		out = append(out, ledgerFigure{takes: takes, tp: tp, lats: [2]latency{lats[0], lats[1]}})
	}
	return out, nil
}

// alternatingLatencies measures each system's round trip with one replica
// of one slot, one call in flight, n calls each over 10 turns, each turn
// on workers started for it.
func alternatingLatencies(ctx context.Context, systems []system, n int) ([]latency, error) {
	const rounds = 10
	all := make([][]time.Duration, len(systems))
	for r := range rounds {
		for k := range systems {
			i := (r + k) % len(systems)
			s := systems[i]
			if err := s.start(ctx, 1, 1); err != nil {
				return nil, err
			}
			_, err := samples(ctx, s.call, ledgerTurnWarmup)
			var d []time.Duration
			if err == nil {
				d, err = samples(ctx, s.call, max(n/rounds, 1))
			}
			s.stop(ctx)
			if err != nil {
				return nil, err
			}
			all[i] = append(all[i], d...)
		}
	}
	out := make([]latency, len(systems))
	for i := range all {
		out[i] = percentiles(all[i])
	}
	return out, nil
}

// reportLedger prints the section and its targets: for the 2 ms tool,
// throughput ≥ 0.95× and p50 ≤ 1.05× the tool declared idempotent; the
// no-op's ratios, stored writes and CPU per call are reported.
func reportLedger(out io.Writer, c config, figs []ledgerFigure) []bool {
	fmt.Fprintln(out, "Effect ledger (SPEC §13, §8): the worker path of the lookup tool not declared idempotent (the default: its workers create a ledger entry before each run) against the same tool declared idempotent (no entry), same run; workers in a child process")
	fmt.Fprintf(out, "Throughput: 1 replica of %d slots, %d in flight, medians over %d interleaved rounds of %d calls; latency: 1 replica of 1 slot, 1 call in flight, %d calls each over 10 alternating turns\n",
		c.slots, c.inflight, c.tpRounds, c.tn, c.n)
	fmt.Fprintln(out, "| tool | worker | calls/s | p50 | p99 | CPU per call (bench + server + workers) | stored per call (tasks, results, ledger) |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, f := range figs {
		what := "no-op"
		if f.takes > 0 {
			what = "takes " + f.takes.String()
		}
		for i, name := range []string{"not declared idempotent (ledger)", "declared idempotent"} {
			p, sv := f.tp.cpuPerCall(i)
			w := f.tp.writesPerCall(i)
			fmt.Fprintf(out, "| %s | %s | %.0f | %s | %s | %.0f + %.0f + %.0f µs | %.2f, %.2f, %.2f |\n", what, name, f.tp.rate(i),
				f.lats[i].p50.Round(time.Microsecond), f.lats[i].p99.Round(time.Microsecond),
				micros(p), micros(sv), micros(f.tp.childPerCall(i, 0)), w[0], w[1], w[2])
		}
	}
	fmt.Fprintln(out)
	var results []bool
	for _, f := range figs {
		printStalls(out, "the ledger's rounds", f.tp, "with the ledger", "idempotent")
		tput, p50 := f.tp.ratio(0, 1), float64(f.lats[0].p50)/float64(f.lats[1].p50)
		if f.takes == 0 {
			fmt.Fprintf(out, "- no-op: throughput with the ledger / idempotent: %.2f×, p50: %.2f× (reported; the cost of one stored write on a call that does nothing)\n", tput, p50)
			continue
		}
		results = append(results,
			verdict(out, fmt.Sprintf("tool taking %s: throughput with the ledger / idempotent", f.takes), tput, "≥", 0.95),
			verdict(out, fmt.Sprintf("tool taking %s: p50 with the ledger / idempotent", f.takes), p50, "≤", 1.05))
	}
	fmt.Fprintln(out)
	return results
}
