package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the throughput measurement: interleaved rounds of
// several systems, each round's calls per second and CPU per call, and the
// robust summaries the figures are made of.

// measureThroughput makes n calls with inflight of them in flight at once
// and returns calls per second.
func measureThroughput(ctx context.Context, call caller, n, inflight int) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	start := time.Now()
	for range inflight {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := call(ctx); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), firstErr
}

// system is what a throughput round starts and stops.
type system interface {
	start(ctx context.Context, replicas, slots int) error
	stop(ctx context.Context)
	call(ctx context.Context) (time.Duration, error)
}

type rawSys struct {
	s  *rawSystem
	ep endpoint
}

func (r rawSys) start(ctx context.Context, n, slots int) error {
	return r.s.startWorkers(ctx, r.ep, n, slots)
}
func (r rawSys) stop(context.Context)                            { r.s.stopWorkers() }
func (r rawSys) call(ctx context.Context) (time.Duration, error) { return 0, r.s.call(ctx) }

type offSys struct {
	s  *offloadSystem
	ep endpoint
}

func (o offSys) start(ctx context.Context, n, slots int) error {
	return o.s.startWorkers(ctx, o.ep, n, slots)
}
func (o offSys) stop(ctx context.Context)                        { o.s.stopWorkers(ctx) }
func (o offSys) call(ctx context.Context) (time.Duration, error) { return 0, o.s.call(ctx) }

// tpRun is what the throughput rounds of one configuration measured: per
// system (in the order given), each round's calls per second, and the CPU
// the rounds used in this process and in the server's.
type tpRun struct {
	rounds [][]float64 // [system][round] calls per second
	cpu    []cpuUse    // [system] summed over the rounds
	calls  int         // calls per round
}

// cpuUse is CPU time used while a system ran its rounds.
type cpuUse struct{ proc, server time.Duration }

// throughputs measures each system with replicas × slots workers, rounds
// times. The systems take turns within a round, and the one that starts a
// round rotates from round to round, so that neither drift on the shared
// machine nor the order favours one. srv, if not nil, is the server's
// process, whose CPU is counted too.
func throughputs(ctx context.Context, systems []system, replicas, slots, n, inflight, rounds int, srv *serverProcess) (tpRun, error) {
	run := tpRun{rounds: make([][]float64, len(systems)), cpu: make([]cpuUse, len(systems)), calls: n}
	for r := range rounds {
		for k := range systems {
			i := (r + k) % len(systems)
			s := systems[i]
			if err := s.start(ctx, replicas, slots); err != nil {
				return tpRun{}, err
			}
			p0, s0 := processCPU(), srv.cpu()
			tp, err := measureThroughput(ctx, s.call, n, inflight)
			p1, s1 := processCPU(), srv.cpu()
			s.stop(ctx)
			if err != nil {
				return tpRun{}, err
			}
			run.rounds[i] = append(run.rounds[i], tp)
			run.cpu[i].proc += p1 - p0
			run.cpu[i].server += s1 - s0
		}
	}
	return run, nil
}

// median returns the median of xs (the mean of the middle two for an even
// count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// rate returns system i's median calls per second over the rounds.
func (t tpRun) rate(i int) float64 { return median(t.rounds[i]) }

// ratio returns the median over the rounds of system i's calls per second
// over the best of the baselines' in the same round: each figure is set
// against the baseline measured right next to it, and a round disturbed by
// the machine's other load moves the median less than it moves a mean.
func (t tpRun) ratio(i int, baselines ...int) float64 {
	rs := make([]float64, len(t.rounds[i]))
	for r, v := range t.rounds[i] {
		best := 0.0
		for _, b := range baselines {
			best = max(best, t.rounds[b][r])
		}
		rs[r] = v / best
	}
	return median(rs)
}

// cpuPerCall returns system i's CPU per call, in this process and in the
// server's.
func (t tpRun) cpuPerCall(i int) (proc, server time.Duration) {
	calls := time.Duration(t.calls * len(t.rounds[i]))
	return t.cpu[i].proc / calls, t.cpu[i].server / calls
}

// stalls returns a note on the rounds that ran at less than a third of
// their system's median (a stall, such as a task waiting for its ack
// wait), or "" when there were none; names names the systems.
func (t tpRun) stalls(names ...string) string {
	var notes []string
	for i, rs := range t.rounds {
		m := median(rs)
		for r, v := range rs {
			if v < m/3 {
				notes = append(notes, fmt.Sprintf("%s round %d: %.0f calls/s", names[i], r+1, v))
			}
		}
	}
	return strings.Join(notes, "; ")
}

// printStalls prints a note on stalled rounds, if any.
func printStalls(out io.Writer, what string, t tpRun, names ...string) {
	if s := t.stalls(names...); s != "" {
		fmt.Fprintf(out, "- note: stalled rounds in %s (the medians leave them out): %s\n", what, s)
	}
}

// printCPU prints the CPU per call of each system in the throughput runs:
// a figure that the machine's other load disturbs far less than calls per
// second, since it counts only the CPU the systems used.
func printCPU(out io.Writer, replicas []int, runs []tpRun) {
	fmt.Fprintln(out, "CPU per call in the throughput runs (this process: agent and workers; server process), less is better")
	fmt.Fprintln(out, "| replicas | batched pulls | one at a time | offload | batched pulls / offload |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- |")
	for i, r := range replicas {
		var total [3]time.Duration
		cells := make([]string, 3)
		for s := range 3 {
			p, sv := runs[i].cpuPerCall(s)
			total[s] = p + sv
			cells[s] = fmt.Sprintf("%.0f + %.0f µs", micros(p), micros(sv))
		}
		fmt.Fprintf(out, "| %d | %s | %s | %s | %.2f× |\n", r, cells[0], cells[1], cells[2], float64(total[0])/float64(total[2]))
	}
	fmt.Fprintln(out)
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
