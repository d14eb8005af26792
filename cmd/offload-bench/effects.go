package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// ledgerSys is offload's path with its workers keeping the effect ledger
// (SPEC §13), or without it (noLedger): the same dispatcher and tool, the
// workers started for each turn. The lookup tool is not declared
// idempotent here (the main sections declare it so, and write no entry):
// the ledger's own cost, on the path of the tools it guards.
type ledgerSys struct {
	s        *offloadSystem
	ep       endpoint
	noLedger bool
}

func (l ledgerSys) start(ctx context.Context, n, slots int) error {
	return l.s.startWorkersWith(ctx, l.ep, n, slots, workerOpts{noLedger: l.noLedger})
}
func (l ledgerSys) stop(ctx context.Context)                        { l.s.stopWorkers(ctx) }
func (l ledgerSys) call(ctx context.Context) (time.Duration, error) { return 0, l.s.call(ctx) }

// ledgerTurnWarmup is how many calls each latency turn makes before it
// measures: its workers were just started.
const ledgerTurnWarmup = 50

// measureLedger measures the worker path with the ledger against without
// it in the same run: throughput with one replica of c.slots slots, and
// the round trip's p50 and p99 with one replica of one slot and one call
// in flight, the two taking turns (each turn with workers of its own; the
// one that starts a round rotates).
func measureLedger(ctx context.Context, off *offloadSystem, ep endpoint, c config, srv *serverProcess) (tpRun, [2]latency, error) {
	systems := []system{ledgerSys{off, ep, false}, ledgerSys{off, ep, true}}
	tp, err := throughputs(ctx, systems, 1, c.slots, c.tn, c.inflight, c.tpRounds, srv)
	if err != nil {
		return tpRun{}, [2]latency{}, err
	}
	const rounds = 10
	var all [2][]time.Duration
	for r := range rounds {
		for k := range systems {
			i := (r + k) % len(systems)
			s := systems[i]
			if err := s.start(ctx, 1, 1); err != nil {
				return tpRun{}, [2]latency{}, err
			}
			_, err := samples(ctx, s.call, ledgerTurnWarmup)
			var d []time.Duration
			if err == nil {
				d, err = samples(ctx, s.call, max(c.n/rounds, 1))
			}
			s.stop(ctx)
			if err != nil {
				return tpRun{}, [2]latency{}, err
			}
			all[i] = append(all[i], d...)
		}
	}
	return tp, [2]latency{percentiles(all[0]), percentiles(all[1])}, nil
}

// reportLedger prints the ledger's section and its targets (within 10 %).
func reportLedger(out io.Writer, c config, tp tpRun, lats [2]latency) []bool {
	fmt.Fprintf(out, "Effect ledger (SPEC §13): the worker path of a tool not declared idempotent (lookup, declared idempotent in the other sections) with the ledger (a KV create before each run, an update after its result) against without it (worker.Config.NoEffectLedger), same run\n")
	fmt.Fprintf(out, "Throughput: 1 replica of %d slots, %d in flight, medians over %d interleaved rounds; latency: 1 replica of 1 slot, 1 call in flight, %d calls each over 10 alternating turns\n", c.slots, c.inflight, c.tpRounds, c.n)
	fmt.Fprintln(out, "| worker | calls/s | p50 | p99 | CPU per call (here + server) |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- |")
	for i, name := range []string{"with the ledger", "without the ledger"} {
		p, sv := tp.cpuPerCall(i)
		fmt.Fprintf(out, "| %s | %.0f | %s | %s | %.0f + %.0f µs |\n", name, tp.rate(i),
			lats[i].p50.Round(time.Microsecond), lats[i].p99.Round(time.Microsecond), micros(p), micros(sv))
	}
	fmt.Fprintln(out)
	printStalls(out, "the ledger's rounds", tp, "with the ledger", "without the ledger")
	results := []bool{
		verdict(out, "throughput with the ledger / without", tp.ratio(0, 1), "≥", 0.9),
		verdict(out, "p50 with the ledger / without", float64(lats[0].p50)/float64(lats[1].p50), "≤", 1.1),
	}
	fmt.Fprintln(out)
	return results
}
