// Command offload-bench measures offload against baselines in the same run
// (SPEC §8) and prints the figures as ratios:
//
//   - round trip of a no-op tool call through JetStream (dispatch → worker →
//     result → back in the caller), p50 and p99, against a raw nats.go
//     program doing the same publish/consume/publish, and against the
//     in-process executor;
//   - throughput of no-op calls with 1, 2 and 4 worker replicas, against the
//     raw baseline with the same replicas;
//   - overlap: 20 background calls of 500 ms on 20 worker slots through the
//     agent loop, against the ideal (500 ms plus the model's time).
//
// Everything runs in this process against an embedded nats-server with file
// storage on loopback; the machine's cores are shared by server, workers and
// caller, so compare the ratios, not the absolute figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/pkg/embedded"
)

type config struct {
	n, warmup, tn, inflight, slots int
	replicas                       []int
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 2000, "round trips measured for latency")
	flag.IntVar(&c.warmup, "warmup", 200, "round trips before measuring")
	flag.IntVar(&c.tn, "throughput-n", 5000, "calls per throughput run")
	flag.IntVar(&c.inflight, "inflight", 64, "calls in flight in throughput runs")
	flag.IntVar(&c.slots, "slots", 16, "concurrent tasks per worker replica")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
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
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "offload-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// caller makes one no-op tool call and returns when its result is back.
type caller func(ctx context.Context) error

type latency struct{ p50, p99 time.Duration }

// samples returns the durations of n sequential calls.
func samples(ctx context.Context, call caller, n int) ([]time.Duration, error) {
	d := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		if err := call(ctx); err != nil {
			return nil, err
		}
		d[i] = time.Since(start)
	}
	return d, nil
}

func percentiles(d []time.Duration) latency {
	d = slices.Clone(d)
	slices.Sort(d)
	return latency{p50: d[len(d)/2], p99: d[len(d)*99/100]}
}

// measureLatencies measures each caller over n sequential calls after
// warmup, in interleaved rounds so that drift on a shared machine affects
// every system alike.
func measureLatencies(ctx context.Context, calls []caller, n, warmup, rounds int) ([]latency, error) {
	all := make([][]time.Duration, len(calls))
	for i, call := range calls {
		if _, err := samples(ctx, call, warmup); err != nil {
			return nil, err
		}
		all[i] = make([]time.Duration, 0, n)
	}
	per := max(n/rounds, 1)
	for range rounds {
		for i, call := range calls {
			d, err := samples(ctx, call, per)
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
				if err := call(ctx); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), firstErr
}

func run(ctx context.Context, c config, out io.Writer) error {
	dir, err := os.MkdirTemp("", "offload-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(ctx, embedded.Config{StoreDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())
	url := srv.URL()

	raw, err := newRawSystem(ctx, url)
	if err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	defer raw.close()
	off, err := newOffloadSystem(ctx, url)
	if err != nil {
		return fmt.Errorf("offload: %w", err)
	}
	defer off.close()

	fmt.Fprintf(out, "offload-bench: embedded nats-server (file storage), loopback; latency n=%d (warm-up %d, 10 interleaved rounds); throughput n=%d per round (2 interleaved rounds), %d in flight, %d slots per replica\n\n",
		c.n, c.warmup, c.tn, c.inflight, c.slots)

	// Latency: one replica with one slot each, one call in flight, the
	// systems measured in alternating rounds.
	if err := raw.startWorkers(ctx, url, 1, 1); err != nil {
		return err
	}
	if err := off.startWorkers(ctx, url, 1, 1); err != nil {
		return err
	}
	lats, err := measureLatencies(ctx, []caller{raw.call, off.call, inProcessCall()}, c.n, c.warmup, 10)
	raw.stopWorkers()
	off.stopWorkers(ctx)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	rawLat, offLat, inLat := lats[0], lats[1], lats[2]
	fmt.Fprintln(out, "Round trip of a no-op tool call (1 replica, 1 in flight)")
	fmt.Fprintln(out, "| system | p50 | p99 | p50 / raw | p99 / raw |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- |")
	row := func(name string, l latency) {
		fmt.Fprintf(out, "| %s | %s | %s | %.2f× | %.2f× |\n", name, l.p50.Round(time.Microsecond), l.p99.Round(time.Microsecond),
			float64(l.p50)/float64(rawLat.p50), float64(l.p99)/float64(rawLat.p99))
	}
	row("raw nats.go baseline", rawLat)
	row("offload (dispatcher → worker → result)", offLat)
	row("offload in-process executor", inLat)
	fmt.Fprintf(out, "\nTarget: offload p50 ≤ 1.3× raw — measured %.2f×\n\n", float64(offLat.p50)/float64(rawLat.p50))

	fmt.Fprintf(out, "Throughput of no-op calls (%d in flight)\n", c.inflight)
	fmt.Fprintln(out, "| replicas | raw calls/s | offload calls/s | offload / raw |")
	fmt.Fprintln(out, "| --- | --- | --- | --- |")
	for _, r := range c.replicas {
		// Two alternating rounds per system, averaged.
		var rawTP, offTP float64
		for range 2 {
			if err := raw.startWorkers(ctx, url, r, c.slots); err != nil {
				return err
			}
			tp, err := measureThroughput(ctx, raw.call, c.tn, c.inflight)
			raw.stopWorkers()
			if err != nil {
				return fmt.Errorf("raw throughput: %w", err)
			}
			rawTP += tp / 2
			if err := off.startWorkers(ctx, url, r, c.slots); err != nil {
				return err
			}
			tp, err = measureThroughput(ctx, off.call, c.tn, c.inflight)
			off.stopWorkers(ctx)
			if err != nil {
				return fmt.Errorf("offload throughput: %w", err)
			}
			offTP += tp / 2
		}
		fmt.Fprintf(out, "| %d | %.0f | %.0f | %.2f× |\n", r, rawTP, offTP, offTP/rawTP)
	}
	fmt.Fprintln(out, "\nTarget: offload throughput ≥ 0.8× raw")

	// Overlap: background calls run side by side while the agent waits.
	const calls, work = 20, 500 * time.Millisecond
	ov, err := measureOverlap(ctx, url, calls, calls, 3, work)
	if err != nil {
		return fmt.Errorf("overlap: %w", err)
	}
	ratio := ov.ratio(work)
	fmt.Fprintf(out, "\nOverlap: %d background calls of %s, 1 replica with %d slots, through the agent loop (median of 3 runs)\n", calls, work, calls)
	fmt.Fprintln(out, "| run | model time | ideal (work + model) | run / ideal |")
	fmt.Fprintln(out, "| --- | --- | --- | --- |")
	fmt.Fprintf(out, "| %s | %s | %s | %.3f× |\n", ov.elapsed.Round(time.Millisecond), ov.model.Round(time.Microsecond), (work + ov.model).Round(time.Millisecond), ratio)
	fmt.Fprintf(out, "\nTarget: ≤ 1.15× the ideal — %s\n", metOrNot(ratio <= 1.15))
	return nil
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
