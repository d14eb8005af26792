// Package telemetry holds what offload's packages share of OpenTelemetry
// tracing (SPEC §14): the tracer of an injected [trace.TracerProvider]
// (a no-op one when none is given: no global state is read), the W3C trace
// context carried in message headers, and the attribute keys of the GenAI
// and messaging semantic conventions the spans use. Configuring an exporter
// from the OTEL_* environment is the binaries' job (internal/otelenv).
package telemetry
