package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// limitsSys is offload's path with its workers' fleet control (SPEC §19)
// on, as always, or off (noLimits: worker.Config.NoLimits), for a tool
// without limits: what fleet control costs the tools it does not hold.
type limitsSys struct {
	s        *offloadSystem
	ep       endpoint
	noLimits bool
}

func (l limitsSys) start(ctx context.Context, n, slots int) error {
	return l.s.startWorkersWith(ctx, l.ep, n, slots, workerOpts{idempotent: true, noLimits: l.noLimits})
}
func (l limitsSys) stop(ctx context.Context)                        { l.s.stopWorkers(ctx) }
func (l limitsSys) call(ctx context.Context) (time.Duration, error) { return 0, l.s.call(ctx) }

// measureLimitsCost measures the worker path with fleet control against
// without it, as measureLedger does the ledger: throughput with one
// replica of c.slots slots, then the round trip's p50 and p99 with one
// replica of one slot, the two taking turns.
func measureLimitsCost(ctx context.Context, off *offloadSystem, ep endpoint, c config, srv *serverProcess) (tpRun, [2]latency, error) {
	systems := []system{limitsSys{off, ep, false}, limitsSys{off, ep, true}}
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

// reportLimitsCost prints the section and its target (SPEC §19: p50 ≤
// 1.05×).
func reportLimitsCost(out io.Writer, c config, tp tpRun, lats [2]latency) []bool {
	fmt.Fprintf(out, "Fleet control (SPEC §19): the worker path of a tool without limits (lookup, declared idempotent) with fleet control on (a gate per tool read on every call, the pump and the state subscription) against without it (worker.Config.NoLimits), same run\n")
	fmt.Fprintf(out, "Throughput: 1 replica of %d slots, %d in flight, medians over %d interleaved rounds; latency: 1 replica of 1 slot, 1 call in flight, %d calls each over 10 alternating turns\n", c.slots, c.inflight, c.tpRounds, c.n)
	fmt.Fprintln(out, "| worker | calls/s | p50 | p99 | CPU per call (here + server) |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- |")
	for i, name := range []string{"with fleet control", "without (NoLimits)"} {
		p, sv := tp.cpuPerCall(i)
		fmt.Fprintf(out, "| %s | %.0f | %s | %s | %.0f + %.0f µs |\n", name, tp.rate(i),
			lats[i].p50.Round(time.Microsecond), lats[i].p99.Round(time.Microsecond), micros(p), micros(sv))
	}
	fmt.Fprintln(out)
	results := []bool{
		verdict(out, "throughput with fleet control / without", tp.ratio(0, 1), "≥", 0.95),
		verdict(out, "p50 with fleet control / without", float64(lats[0].p50)/float64(lats[1].p50), "≤", 1.05),
	}
	fmt.Fprintln(out)
	return results
}
