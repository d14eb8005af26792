// Package otlprecv is a small OTLP/HTTP trace receiver on loopback: it
// decodes the protobuf export requests the OTLP exporters send to
// /v1/traces and keeps their spans, for the end-to-end tests of SPEC §14,
// or drops them unread, for the tracing cost measured by `make bench`.
package otlprecv

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, its IDs in hex.
type Span struct {
	// Service is the resource's service.name.
	Service string
	// TraceID, SpanID and ParentSpanID identify the span and its parent
	// (empty for a root).
	TraceID, SpanID, ParentSpanID string
	// Name and Kind (e.g. SPAN_KIND_PRODUCER).
	Name, Kind string
	// Attrs are the span's attributes: strings, int64s, float64s, bools,
	// or the text of other values.
	Attrs map[string]any
	// Links are the span contexts the span links to.
	Links []Link
	// Start and End are the span's times.
	Start, End time.Time
	// Error reports an error status.
	Error bool
}

// Link is a span link.
type Link struct {
	TraceID, SpanID string
}

// Receiver receives OTLP/HTTP trace exports.
type Receiver struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}

	discard bool // read and drop the exports, decoding nothing (the bench)

	mu      sync.Mutex
	spans   []Span
	count   int
	exports int
	bytes   int64
	changed chan struct{}
}

// Start starts a receiver on a free loopback port that keeps the spans.
func Start(ctx context.Context) (*Receiver, error) { return start(ctx, false) }

// StartDiscard starts a receiver that reads every export and drops it,
// decoding nothing, as a collector in another process costs the exporting
// process nothing more ([Receiver.Exports] counts them).
func StartDiscard(ctx context.Context) (*Receiver, error) { return start(ctx, true) }

func start(ctx context.Context, discard bool) (*Receiver, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlprecv: listen: %w", err)
	}
	r := &Receiver{ln: ln, done: make(chan struct{}), changed: make(chan struct{}), discard: discard}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.traces)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// Endpoint is the receiver's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *Receiver) Endpoint() string { return "http://" + r.ln.Addr().String() }

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Count returns how many spans were received (none are counted by a
// discarding receiver).
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Exports returns how many export requests arrived, and their bytes.
func (r *Receiver) Exports() (n int, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exports, r.bytes
}

// Changed returns a channel closed when the next export arrives.
func (r *Receiver) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Close stops the receiver.
func (r *Receiver) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	<-r.done
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("otlprecv: close: %w", err)
	}
	return nil
}

func (r *Receiver) traces(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer func() { _ = zr.Close() }()
		body = zr
	}
	data, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.discard {
		r.mu.Lock()
		r.exports++
		r.bytes += int64(len(data))
		r.mu.Unlock()
		r.reply(w)
		return
	}
	var ex coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &ex); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	n := 0
	for _, rs := range ex.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
			for _, s := range ss.GetSpans() {
				got = append(got, spanOf(service, s))
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.count += n
	r.exports++
	r.bytes += int64(len(data))
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	r.reply(w)
}

// reply answers an export with an empty (full success) response.
func (r *Receiver) reply(w http.ResponseWriter) {
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func spanOf(service string, s *tracepb.Span) Span {
	sp := Span{
		Service: service, TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
		ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind().String(),
		Attrs: map[string]any{},
		Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())), //nolint:gosec // nanoseconds since 1970 fit an int64 until 2262
		Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
	}
	for _, kv := range s.GetAttributes() {
		sp.Attrs[kv.GetKey()] = valueOf(kv.GetValue())
	}
	for _, l := range s.GetLinks() {
		sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
	}
	return sp
}

func valueOf(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	default:
		return v.String()
	}
}
