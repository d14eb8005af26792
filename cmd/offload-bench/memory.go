package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// heapAfterGC returns the live heap after a full collection.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// measureFinishedMemory returns the heap growth over n calls of s, all of
// them finished (and, for offload, remembered by the dispatcher within its
// 10-minute window).
func measureFinishedMemory(ctx context.Context, off system, n, inflight, slots int) (uint64, error) {
	if err := off.start(ctx, 1, slots); err != nil {
		return 0, err
	}
	defer off.stop(ctx)
	// Warm up: connections, buffers and pools reach their working size.
	if _, err := measureThroughput(ctx, off.call, 2000, inflight); err != nil {
		return 0, err
	}
	before := heapAfterGC()
	if _, err := measureThroughput(ctx, off.call, n, inflight); err != nil {
		return 0, err
	}
	after := heapAfterGC()
	return after - min(before, after), nil
}

// rss returns the process's resident set size in bytes.
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// longSample is the process's memory after some calls of a long run.
type longSample struct {
	calls   int
	elapsed time.Duration
	rss     uint64 // resident set size
	heap    uint64 // live heap after a full collection
}

// measureLong makes n calls through s (one replica) and samples the
// process's RSS and live heap every step calls.
func measureLong(ctx context.Context, s system, n, step, inflight, slots int) ([]longSample, error) {
	if err := s.start(ctx, 1, slots); err != nil {
		return nil, err
	}
	defer s.stop(ctx)
	var out []longSample
	start := time.Now()
	for done := 0; done < n; {
		k := min(step, n-done)
		if _, err := measureThroughput(ctx, s.call, k, inflight); err != nil {
			return nil, err
		}
		done += k
		heap := heapAfterGC()
		out = append(out, longSample{calls: done, elapsed: time.Since(start), rss: rss(), heap: heap})
	}
	return out, nil
}

// slope returns the least-squares slope of y over the samples' calls, in
// bytes per call: how fast the memory grows, robust to the jitter of a
// single sample (the Go heap goal and the scavenger move the RSS by a few
// MiB from one sample to the next).
func slope(s []longSample, y func(longSample) uint64) float64 {
	if len(s) < 2 {
		return 0
	}
	var mx, my float64
	for _, p := range s {
		mx += float64(p.calls)
		my += float64(y(p))
	}
	mx /= float64(len(s))
	my /= float64(len(s))
	var num, den float64
	for _, p := range s {
		dx := float64(p.calls) - mx
		num += dx * (float64(y(p)) - my)
		den += dx * dx
	}
	return num / den
}

func rssOf(p longSample) uint64  { return p.rss }
func heapOf(p longSample) uint64 { return p.heap }

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// flatSlack is how much faster than the baseline's the RSS of offload may
// grow over the long run and still count as flat: 4 B per call, 3.8 MiB
// over a million calls (before the dispatcher's memory was capped it grew
// by ~56 B per call).
const flatSlack = 4.0

// reportLong prints the long runs of the baseline and offload side by side
// and the flatness target: offload's RSS slope at most flatSlack bytes per
// call above the baseline's.
func reportLong(out io.Writer, raw, off []longSample, inflight, slots int) bool {
	fmt.Fprintf(out, "Long run: %d calls each through the raw baseline (batched pulls), then offload (a fresh dispatcher), 1 replica, %d slots, %d in flight; the process's RSS and live heap after a GC\n",
		off[len(off)-1].calls, slots, inflight)
	fmt.Fprintln(out, "| calls | baseline elapsed | baseline RSS | baseline live heap | offload elapsed | offload RSS | offload live heap |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- | --- | --- |")
	for i := range min(len(raw), len(off)) {
		r, o := raw[i], off[i]
		fmt.Fprintf(out, "| %d | %s | %.1f MiB | %.1f MiB | %s | %.1f MiB | %.1f MiB |\n", o.calls,
			r.elapsed.Round(time.Second), mib(r.rss), mib(r.heap), o.elapsed.Round(time.Second), mib(o.rss), mib(o.heap))
	}
	fmt.Fprintln(out)
	growth := func(s []longSample, y func(longSample) uint64) float64 {
		return float64(y(s[len(s)-1])) - float64(y(s[0]))
	}
	span := off[len(off)-1].calls - off[0].calls
	fmt.Fprintf(out, "From %d to %d calls: offload RSS %+.1f MiB (slope %.1f B/call), live heap %+.1f MiB (slope %.1f B/call); baseline RSS %+.1f MiB (slope %.1f B/call), live heap %+.1f MiB (slope %.1f B/call)\n",
		off[0].calls, off[len(off)-1].calls,
		growth(off, rssOf)/(1<<20), slope(off, rssOf), growth(off, heapOf)/(1<<20), slope(off, heapOf),
		growth(raw, rssOf)/(1<<20), slope(raw, rssOf), growth(raw, heapOf)/(1<<20), slope(raw, heapOf))
	extra := slope(off, rssOf) - slope(raw, rssOf)
	fmt.Fprintf(out, "Flat means: offload's RSS grows, by the least-squares slope over the samples, at most %.0f B per call faster than the baseline's (%.1f MiB over these %d calls)\n",
		flatSlack, flatSlack*float64(span)/(1<<20), span)
	return verdict(out, fmt.Sprintf("offload RSS slope − baseline RSS slope (%.1f B/call) / %.0f B/call", extra, flatSlack), extra/flatSlack, "≤", 1)
}
