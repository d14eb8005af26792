package telemetry

import (
	"context"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header names of the W3C trace context (SPEC §14), as set on NATS messages.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// w3c is the W3C Trace Context propagator: stateless, so no global.
var w3c propagation.TraceContext

// Carrier adapts message headers (nats.Header converts to it) to the
// propagator. Keys are set as written (lower case: traceparent); Get finds
// a key in any case, since a person's `nats pub -H Traceparent:…` keeps
// theirs.
type Carrier map[string][]string

// Get returns the first value of key, matched without regard to case.
func (c Carrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set sets key to value.
func (c Carrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes the trace context of ctx's span into h (nothing when ctx
// carries no valid span context: the no-op provider's spans add no header).
func Inject(ctx context.Context, h map[string][]string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	if ts := sc.TraceState().String(); ts != "" {
		h[TracestateHeader] = []string{ts}
	}
	h[TraceparentHeader] = []string{Traceparent(sc)}
}

// Extract returns ctx with the remote span context of h's traceparent and
// tracestate, or ctx as it is when h carries none (or a malformed one).
func Extract(ctx context.Context, h map[string][]string) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return w3c.Extract(ctx, Carrier(h))
}

// SpanContextOf returns the span context of h's trace headers; it is not
// valid when h carries none.
func SpanContextOf(h map[string][]string) trace.SpanContext {
	return trace.SpanContextFromContext(Extract(context.Background(), h))
}

// Traceparent returns the traceparent header value of sc, or "" when sc is
// not valid: what the W3C propagator writes (version 00, the sampled and
// random flags only), formatted into one string and nothing else (the
// propagator's Inject through a carrier costs six allocations, and a
// traced dispatch writes the value twice: its header and the task's field).
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte // 00-<32 hex>-<16 hex>-<2 hex>
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	return string(b[:])
}

// ParseTraceparent returns the span context of a traceparent header value;
// it is not valid when v is empty or malformed.
func ParseTraceparent(v string) trace.SpanContext {
	if v == "" {
		return trace.SpanContext{}
	}
	return SpanContextOf(map[string][]string{TraceparentHeader: {v}})
}
