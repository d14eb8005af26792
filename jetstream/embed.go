// Package jetstream holds the JetStream definitions of offload's wire
// protocol (SPEC §5.1) as the JSON files an operator applies with the nats
// CLI, embedded for the binaries that create them at start-up.
//
//   - streams/*.json: one stream per subject family, in the format of
//     `nats stream add --config` (the server's StreamConfig JSON, durations in
//     nanoseconds), plus the backing stream of each KV bucket
//     (streams/KV_<bucket>.json);
//   - consumers/task.json: the per-tool durable pull consumer of tasks, in the
//     format of `nats consumer add --config`, a template with a <tool>
//     placeholder;
//   - consumers/exhausted.json: the per-tool durable pull consumer of the
//     max-deliveries advisories captured by streams/TOOLS_EXHAUSTED.json,
//     a template of the same kind.
//
// The files are written for the default prefix "tools"; natsjs rewrites
// names and subjects for another prefix. The package's name clashes with
// nats.go's jetstream package, so import it under an alias:
//
//	import defs "github.com/offload-dev/offload/jetstream"
package jetstream

import "embed"

// FS holds streams/*.json, consumers/task.json and consumers/exhausted.json.
//
//go:embed streams consumers
var FS embed.FS
