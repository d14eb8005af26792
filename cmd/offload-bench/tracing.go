package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The cost of tracing (SPEC §14, issue 29): offload inline with tracing on
// (a sampler of 1.0, every span batched and exported over OTLP/HTTP to a
// receiver in a child process, which reads and drops them, as a collector
// elsewhere would; its CPU is reported apart) against the same path
// untraced (no TracerProvider: the no-op), round trip and throughput, in
// interleaved rounds of the same run. A traced call makes four spans: the
// agent's tool span, the dispatch (producer), the worker's task
// (consumer) and the worker's tool span.

// tracingCost measures and prints the section; untraced is the offload
// system of the other figures. It returns the verdicts.
func tracingCost(ctx context.Context, c config, ep endpoint, proc *serverProcess, untraced system, out io.Writer) ([]bool, error) {
	recv, err := startReceiver(ctx)
	if err != nil {
		return nil, err
	}
	stopped := false
	var exports int
	var size int64
	defer func() {
		if !stopped {
			recv.stop()
		}
	}()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(recv.endpoint+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("exporter: %w", err)
	}
	counted := &countingExporter{SpanExporter: exp}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(counted), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}()
	ts, err := newTracedOffloadSystem(ctx, ep, tp)
	if err != nil {
		return nil, err
	}
	defer ts.close()
	traced := offSys{ts, ep}

	for _, s := range []system{untraced, traced} {
		if err := s.start(ctx, 1, 1); err != nil {
			return nil, err
		}
	}
	lats, err := measureLatencies(ctx, []caller{untraced.call, traced.call}, []int{c.n, c.n}, c.warmup, 10)
	for _, s := range []system{untraced, traced} {
		s.stop(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	r0 := recv.cpu()
	tput, err := throughputs(ctx, []system{untraced, traced}, 1, c.slots, c.tn, c.inflight, c.tpRounds, proc)
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = tp.ForceFlush(fctx)
	cancel()
	// Only the traced rounds export: the receiver's CPU is theirs.
	recvPerCall := (recv.cpu() - r0) / time.Duration(max(c.tn*c.tpRounds, 1))
	exports, size = recv.stop()
	stopped = true

	fmt.Fprintln(out, "Tracing cost: offload inline traced (sampler 1.0, 4 spans a call exported over OTLP/HTTP to a receiver in a child process) against untraced (no TracerProvider)")
	fmt.Fprintln(out, "| system | p50 | p99 | throughput calls/s (1 replica) | CPU per call (here + server + receiver) |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- |")
	for i, name := range []string{"untraced", "traced"} {
		p, sv := tput.cpuPerCall(i)
		rc := time.Duration(0)
		if i == 1 {
			rc = recvPerCall
		}
		fmt.Fprintf(out, "| %s | %s | %s | %.0f | %.0f + %.0f + %.0f µs |\n", name, lats[i].p50.Round(time.Microsecond), lats[i].p99.Round(time.Microsecond), tput.rate(i),
			micros(p), micros(sv), micros(rc))
	}
	fmt.Fprintf(out, "Exported: %d spans in %d OTLP/HTTP requests of %.0f KiB on average (the batch processor drops what overflows its queue of 2048)\n",
		counted.spans.Load(), exports, float64(size)/float64(max(exports, 1))/1024)
	fmt.Fprintln(out)
	return []bool{
		verdict(out, "traced p50 / untraced p50", float64(lats[1].p50)/float64(lats[0].p50), "≤", 1.1),
		verdict(out, "traced throughput / untraced", tput.ratio(1, 0), "≥", 0.9),
	}, nil
}

// countingExporter counts the spans exported.
type countingExporter struct {
	sdktrace.SpanExporter
	spans atomic.Int64
}

// ExportSpans counts spans and exports them.
func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.spans.Add(int64(len(spans)))
	return c.SpanExporter.ExportSpans(ctx, spans) //nolint:wrapcheck // the exporter's error, as the SDK reports it
}
