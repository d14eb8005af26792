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

// measureLong makes n calls through offload (one replica) and prints the
// RSS and the live heap every n/10 calls; the RSS is flat when it grows by
// at most the 64 bytes a remembered call may take, per call, from the first
// tenth to the end.
func measureLong(ctx context.Context, out io.Writer, off system, n, inflight, slots int) (bool, error) {
	if err := off.start(ctx, 1, slots); err != nil {
		return false, err
	}
	defer off.stop(ctx)
	step := max(n/10, 1)
	fmt.Fprintf(out, "Long run: %d calls (1 replica, %d slots, %d in flight)\n", n, slots, inflight)
	fmt.Fprintln(out, "| calls | elapsed | RSS | live heap |")
	fmt.Fprintln(out, "| --- | --- | --- | --- |")
	start := time.Now()
	var first, last uint64
	for done := 0; done < n; done += step {
		if _, err := measureThroughput(ctx, off.call, step, inflight); err != nil {
			return false, err
		}
		heap := heapAfterGC()
		r := rss()
		if done == 0 {
			first = r
		}
		last = r
		fmt.Fprintf(out, "| %d | %s | %.1f MiB | %.1f MiB |\n", done+step, time.Since(start).Round(time.Second), float64(r)/(1<<20), float64(heap)/(1<<20))
	}
	fmt.Fprintln(out)
	// Within the dispatcher's 10-minute window every call is remembered
	// (bounded to 64 bytes each), so flat means: the RSS grows by no more
	// than that per call from the first tenth on.
	perCall := float64(last-min(first, last)) / float64(n-step)
	fmt.Fprintf(out, "RSS after the first tenth %.1f MiB, at the end %.1f MiB (%.2f×): %.1f B per call\n", float64(first)/(1<<20), float64(last)/(1<<20), float64(last)/float64(first), perCall)
	return verdict(out, "RSS growth per call / 64 B", perCall/64, "≤", 1), nil
}
