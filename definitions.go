// Package offload holds the JetStream definitions of offload's wire
// protocol (SPEC §5.1), the JSON files of the jetstream/ directory that an
// operator applies with the nats CLI, embedded for the binaries that create
// them at start-up (natsjs.Provision reads them from [Definitions]). The
// runtime itself is in the packages under pkg/.
//
// [Definitions] holds:
//
//   - streams/*.json: one stream per subject family, in the format of
//     `nats stream add --config` (the server's StreamConfig JSON, durations in
//     nanoseconds), plus the backing stream of each KV bucket
//     (streams/KV_<bucket>.json);
//   - consumers/task.json: the per-tool durable pull consumer of tasks, in the
//     format of `nats consumer add --config`, a template with a <tool>
//     placeholder; its metadata's offload.max_deliver is the delivery limit
//     the workers enforce (the server's max_deliver is -1).
//
// The files are written for the default prefix "tools"; natsjs rewrites
// names and subjects for another prefix.
//
// The definitions are embedded from here, the module's root, rather than by
// a package in jetstream/: a package there would be named jetstream, like
// nats.go's, and need an alias wherever both are imported.
package offload

import (
	"embed"
	"io/fs"
)

//go:embed jetstream/streams jetstream/consumers
var definitions embed.FS

// Definitions returns the JetStream definitions: streams/*.json,
// consumers/task.json and consumers/exhausted.json (the jetstream/
// directory of the repository).
func Definitions() fs.FS {
	sub, err := fs.Sub(definitions, "jetstream")
	if err != nil {
		panic("offload: embedded definitions: " + err.Error()) // a constant, valid path
	}
	return sub
}
