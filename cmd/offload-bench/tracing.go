package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/offload-dev/offload/internal/otelenv"
)

// The cost of tracing (SPEC §14, §8 as amended by issue 40): offload
// inline traced against the same path untraced (no TracerProvider: the
// no-op), round trip and throughput, in interleaved rounds of the same
// run, at the sampler a production fleet runs
// (OTEL_TRACES_SAMPLER=parentbased_traceidratio,
// OTEL_TRACES_SAMPLER_ARG=0.1) and at always_on. A traced call makes four
// spans: the agent's tool span, the dispatch (producer), the worker's task
// (consumer) and the worker's tool span; at the ratio sampler nine calls
// in ten record none of them and carry an unsampled traceparent. The
// agent side runs in this process, its sampler from the same variables
// (otelenv.Sampler); the workers in a child process each
// (workerproc.go), configured by the OTEL_* variables as toolworker is;
// the spans of both go, batched, over OTLP/HTTP to a receiver in another
// child process, which reads and drops them, as a collector elsewhere
// would. The CPU per call is measured in each process. The tool is the
// no-op lookup with the default tool options (its workers keep the effect
// ledger).

// tracedVariant is one traced configuration of the section.
type tracedVariant struct {
	name   string
	env    []string // OTEL_TRACES_SAMPLER and its argument
	prefix string   // its streams' (a dispatcher reads every result of its prefix)
}

// tracedVariants are the section's samplers.
var tracedVariants = []tracedVariant{
	{"traced, parentbased_traceidratio 0.1", []string{"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.1"}, "trratio"},
	{"traced, always_on", []string{"OTEL_TRACES_SAMPLER=always_on"}, "tralways"},
}

// tracingCost measures and prints the section, untraced being the agent
// side of offload's other figures (its workers here in a child process).
// It returns the verdicts.
func tracingCost(ctx context.Context, c config, ep endpoint, proc *serverProcess, untraced *offloadSystem, out io.Writer) ([]bool, error) {
	recv, err := startReceiver(ctx)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			recv.stop()
		}
	}()
	uwp, err := startWorkerProcess(ctx, ep)
	if err != nil {
		return nil, err
	}
	defer uwp.close()
	systems := []system{childSys{s: untraced, wp: uwp}}
	var counted []*countingExporter
	for _, v := range tracedVariants {
		env := append([]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + recv.endpoint + "/v1/traces"}, v.env...)
		sampler, err := otelenv.Sampler(envLookup(env))
		if err != nil {
			return nil, err
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(recv.endpoint+"/v1/traces"))
		if err != nil {
			return nil, fmt.Errorf("exporter: %w", err)
		}
		ce := &countingExporter{SpanExporter: exp}
		counted = append(counted, ce)
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(ce), sdktrace.WithSampler(sampler))
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx)
		}()
		ts, err := newTracedOffloadSystem(ctx, ep, tp, v.prefix)
		if err != nil {
			return nil, err
		}
		defer ts.close()
		wp, err := startWorkerProcess(ctx, ep, env...)
		if err != nil {
			return nil, err
		}
		defer wp.close()
		systems = append(systems, childSys{s: ts, wp: wp, recv: recv})
	}

	lats, err := alternatingLatencies(ctx, systems, c.n)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	tput, err := throughputs(ctx, systems, 1, c.slots, c.tn, c.inflight, c.tpRounds, proc)
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	exports, size := recv.stop()
	stopped = true

	fmt.Fprintln(out, "Tracing cost: offload inline traced (4 spans a sampled call, exported over OTLP/HTTP to a receiver in a child process) against untraced (no TracerProvider); the agent side here, the workers in a child process each; the no-op lookup with the default tool options")
	fmt.Fprintf(out, "Latency: 1 replica of 1 slot, 1 call in flight, %d calls each over 10 alternating turns; throughput: 1 replica of %d slots, %d in flight, medians over %d interleaved rounds of %d calls\n",
		c.n, c.slots, c.inflight, c.tpRounds, c.tn)
	fmt.Fprintln(out, "| system | p50 | p99 | calls/s | CPU per call: bench + server + workers + receiver |")
	fmt.Fprintln(out, "| --- | --- | --- | --- | --- |")
	names := []string{"untraced"}
	for _, v := range tracedVariants {
		names = append(names, v.name)
	}
	for i, name := range names {
		p, sv := tput.cpuPerCall(i)
		fmt.Fprintf(out, "| %s | %s | %s | %.0f | %.0f + %.0f + %.0f + %.0f µs |\n", name, lats[i].p50.Round(time.Microsecond), lats[i].p99.Round(time.Microsecond), tput.rate(i),
			micros(p), micros(sv), micros(tput.childPerCall(i, 0)), micros(tput.childPerCall(i, 1)))
	}
	var agentSpans int64
	for _, ce := range counted {
		agentSpans += ce.spans.Load()
	}
	fmt.Fprintf(out, "Exported: %d spans of the agent side (the workers' are counted by the receiver's requests: %d OTLP/HTTP requests of %.0f KiB on average)\n",
		agentSpans, exports, float64(size)/float64(max(exports, 1))/1024)
	fmt.Fprintln(out)
	printStalls(out, "the tracing rounds", tput, names...)
	for i := 1; i < len(names); i++ {
		p0, s0 := tput.cpuPerCall(0)
		p, sv := tput.cpuPerCall(i)
		fmt.Fprintf(out, "- %s: CPU per call more than untraced: bench %+.0f, server %+.0f, workers %+.0f, receiver %+.0f µs\n", names[i],
			micros(p-p0), micros(sv-s0), micros(tput.childPerCall(i, 0)-tput.childPerCall(0, 0)), micros(tput.childPerCall(i, 1)))
	}
	return []bool{
		verdict(out, "parentbased_traceidratio 0.1: throughput / untraced", tput.ratio(1, 0), "≥", 0.95),
		verdict(out, "parentbased_traceidratio 0.1: p50 / untraced", float64(lats[1].p50)/float64(lats[0].p50), "≤", 1.05),
		verdict(out, "always_on: throughput / untraced", tput.ratio(2, 0), "≥", 0.85),
	}, nil
}

// envLookup returns a getenv of the KEY=value pairs env.
func envLookup(env []string) func(string) string {
	return func(key string) string {
		for _, kv := range env {
			if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
				return kv[len(key)+1:]
			}
		}
		return ""
	}
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
