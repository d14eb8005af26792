package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
)

// findStreams finds the streams a worker uses beside the tasks stream and
// the registry's (results, cancels and, with the effect ledger, the
// ledger's) without reading their info, which lists their subjects and
// so every tool's conversations, tasks and keys: by a direct get of a
// subject or key of the worker's own tool, which a stream answers (404
// when nothing is stored there) and a missing one does not. A stream
// found missing is ensured as [natsjs.EnsureStreams] does (created when
// the user may, else an error naming it).
func (w *Worker) findStreams(ctx context.Context, js jetstream.JetStream, popts natsjs.ProvisionOptions) error {
	tool := w.toolNames()[0]
	type probe struct{ stream, subject string }
	probes := []probe{
		{w.names.Results, w.subj.Result("0", "0", tool)},
		{w.names.Cancel, w.subj.Cancel("0", "0", tool)},
	}
	if !w.cfg.NoEffectLedger {
		probes = append(probes, probe{w.names.EffectsStream, "$KV." + w.names.EffectsBucket + "." + natsjs.EffectKey(tool, "0", 0)})
	}
	if !w.cfg.NoLimits {
		probes = append(probes,
			probe{w.names.LimitsStream, "$KV." + w.names.LimitsBucket + "." + natsjs.LimitsKey(tool)},
			probe{w.names.QueueStream, "$KV." + w.names.QueueBucket + "." + natsjs.QueueKey(tool, "0", 0)},
			probe{w.names.Dead, w.subj.Dead("0", "0", tool)})
	} else {
		probes = append(probes, probe{w.names.Dead, w.subj.Dead("0", "0", tool)})
	}
	for _, p := range probes {
		pctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
		_, err := direct.Last(pctx, w.cfg.Conn, p.stream, p.subject)
		cancel()
		if err == nil {
			continue
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			// A refused look-up (no reply comes) is named with its fix.
			return fmt.Errorf("natsjs: worker: look stream %s up: %w", p.stream, natsjs.Explain(ctx, js, "$JS.API.DIRECT.GET."+p.stream+"."+p.subject, err))
		}
		if err := natsjs.EnsureStreams(ctx, js, popts, p.stream); err != nil {
			return fmt.Errorf("natsjs: worker: stream %s not found (a direct get of %s had no responder): %w", p.stream, p.subject, jsop.Nested(err))
		}
	}
	return nil
}
