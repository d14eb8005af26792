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
// and returns calls per second (a closed loop: each of the inflight
// callers makes its next call once its last is back).
func measureThroughput(ctx context.Context, call caller, n, inflight int) (float64, error) {
	tp, _, err := measureRound(ctx, call, n, inflight, false)
	return tp, err
}

// measureRound is measureThroughput that also returns the calls' round
// trips when timed.
func measureRound(ctx context.Context, call caller, n, inflight int, timed bool) (float64, []time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	var took []time.Duration
	if timed {
		took = make([]time.Duration, n)
	}
	start := time.Now()
	for range inflight {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				t0 := time.Now()
				own, err := call(ctx)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				if timed {
					took[i-1] = time.Since(t0)
					if own > 0 {
						took[i-1] = own
					}
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), took, firstErr
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

// start starts n workers of slots each, with the default tool options
// (offloadSystem.startWorkers).
func (o offSys) start(ctx context.Context, n, slots int) error {
	return o.s.startWorkers(ctx, o.ep, n, slots)
}
func (o offSys) stop(ctx context.Context)                        { o.s.stopWorkers(ctx) }
func (o offSys) call(ctx context.Context) (time.Duration, error) { return 0, o.s.call(ctx) }

// offIdemSys is offSys with the lookup tool declared idempotent (no
// ledger entry): -only offload-idempotent, to profile the path without the
// ledger.
type offIdemSys struct {
	s  *offloadSystem
	ep endpoint
}

func (o offIdemSys) start(ctx context.Context, n, slots int) error {
	return o.s.startWorkersWith(ctx, o.ep, n, slots, workerOpts{idempotent: true, prefix: o.s.prefix})
}
func (o offIdemSys) stop(ctx context.Context)                        { o.s.stopWorkers(ctx) }
func (o offIdemSys) call(ctx context.Context) (time.Duration, error) { return 0, o.s.call(ctx) }

// tpRun is what the throughput rounds of one configuration measured: per
// system (in the order given), each round's calls per second and the p50
// of its calls' round trips, the CPU the rounds used in this process, in
// the server's and in the system's own child processes (its workers', its
// trace receiver's), and the messages the server stored meanwhile.
type tpRun struct {
	rounds [][]float64       // [system][round] calls per second
	p50s   [][]time.Duration // [system][round] the round trips' p50
	cpu    []cpuUse          // [system] summed over the rounds
	writes [][3]uint64       // [system] stored in the tasks', results' and ledger's streams over the rounds
	calls  int               // calls per round
}

// cpuUse is CPU time used while a system ran its rounds: in this process,
// the server's, and each of the system's own processes.
type cpuUse struct {
	proc, server time.Duration
	children     []time.Duration
}

// childCPU is a system with processes of its own (childSys: its workers',
// and a traced one's receiver): the CPU each has used.
type childCPU interface{ childCPU() []time.Duration }

// flusher is a system with work left once its calls are back (spans to
// export): flush does it, within the measured time.
type flusher interface{ flush(ctx context.Context) }

// throughputs measures each system with replicas × slots workers, rounds
// times. The systems take turns within a round, and the one that starts a
// round rotates from round to round, so that neither drift on the shared
// machine nor the order favours one. srv, if not nil, is the server's
// process, whose CPU and stored messages are counted too.
func throughputs(ctx context.Context, systems []system, replicas, slots, n, inflight, rounds int, srv *serverProcess) (tpRun, error) {
	run := tpRun{rounds: make([][]float64, len(systems)), p50s: make([][]time.Duration, len(systems)),
		cpu: make([]cpuUse, len(systems)), writes: make([][3]uint64, len(systems)), calls: n}
	for r := range rounds {
		for k := range systems {
			i := (r + k) % len(systems)
			s := systems[i]
			if err := s.start(ctx, replicas, slots); err != nil {
				return tpRun{}, err
			}
			cc, _ := s.(childCPU)
			var c0 []time.Duration
			if cc != nil {
				c0 = cc.childCPU()
			}
			w0 := srv.stored(ctx)
			p0, s0 := processCPU(), srv.cpu()
			tp, took, err := measureRound(ctx, s.call, n, inflight, true)
			if f, ok := s.(flusher); ok && err == nil {
				f.flush(ctx)
			}
			p1, s1 := processCPU(), srv.cpu()
			w1 := srv.stored(ctx)
			if cc != nil {
				for j, c := range cc.childCPU() {
					if j >= len(run.cpu[i].children) {
						run.cpu[i].children = append(run.cpu[i].children, 0)
					}
					run.cpu[i].children[j] += c - c0[j]
				}
			}
			s.stop(ctx)
			if err != nil {
				return tpRun{}, err
			}
			run.rounds[i] = append(run.rounds[i], tp)
			run.p50s[i] = append(run.p50s[i], percentiles(took).p50)
			run.cpu[i].proc += p1 - p0
			run.cpu[i].server += s1 - s0
			for j := range w1 {
				run.writes[i][j] += w1[j] - w0[j]
			}
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

// childPerCall returns system i's CPU per call in its j-th own process (0
// when it has none).
func (t tpRun) childPerCall(i, j int) time.Duration {
	if j >= len(t.cpu[i].children) {
		return 0
	}
	return t.cpu[i].children[j] / time.Duration(t.calls*len(t.rounds[i]))
}

// writesPerCall returns the messages stored per call of system i in the
// tasks', the results' and the ledger's streams.
func (t tpRun) writesPerCall(i int) [3]float64 {
	calls := float64(t.calls * len(t.rounds[i]))
	var out [3]float64
	for j, w := range t.writes[i] {
		out[j] = float64(w) / calls
	}
	return out
}

// roundRatios returns, per round, system i's calls per second over the
// best of the baselines' in the same round, and its p50 over the best
// (lowest) of theirs.
func (t tpRun) roundRatios(i int, baselines ...int) (tput, p50 []float64) {
	for r, v := range t.rounds[i] {
		best, bestP50 := 0.0, time.Duration(0)
		for _, b := range baselines {
			best = max(best, t.rounds[b][r])
			if bestP50 == 0 || t.p50s[b][r] < bestP50 {
				bestP50 = t.p50s[b][r]
			}
		}
		tput = append(tput, v/best)
		p50 = append(p50, float64(t.p50s[i][r])/float64(bestP50))
	}
	return tput, p50
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
