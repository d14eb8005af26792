package agentproc

import (
	"context"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
)

// Provisioned is what [Provision] created or checked.
type Provisioned struct {
	// Streams are the streams, with their subjects.
	Streams []jetstream.StreamConfig
	// Consumers are the consumers, each as [stream, name].
	Consumers [][2]string
	// Reprojected is how many stored conversations got their pending
	// record and status entry written.
	Reprojected int
	// Obsolete names a stream of an earlier deployment that nothing uses
	// any more ("" when there is none).
	Obsolete string
}

// Provision creates or checks, as an operator (the admin user of
// deploy/nats/auth.conf), everything agents and workers use, so that
// they can run with least-privilege users: every stream and KV bucket of
// jetstream/ (streams of an earlier deployment brought to their
// definitions), agent serve's wake consumers and notify consumer and its
// keys, the task consumers of tools; and it writes the pending records and status
// entries of the conversations stored before those existed.
func Provision(ctx context.Context, nc *nats.Conn, opts natsjs.ProvisionOptions, tools []string) (*Provisioned, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := natsjs.Provision(ctx, js, opts); err != nil {
		return nil, err
	}
	streams, err := natsjs.StreamConfigs(opts)
	if err != nil {
		return nil, err
	}
	out := &Provisioned{Streams: streams}
	// agent serve's wake consumers, shared by its replicas (which create
	// them when missing and allowed; the agent role of auth.conf is not).
	if _, err := natsjs.EnsureWakeConsumers(ctx, js, opts); err != nil {
		return nil, err
	}
	for _, stream := range natsjs.WakeStreams(opts.Prefix) {
		out.Consumers = append(out.Consumers, [2]string{stream, natsjs.WakeConsumerName})
	}
	// agent serve --notify's consumer, shared by its replicas: from here
	// on, every announcement and resolution is notified.
	if _, err := natsjs.EnsureNotifyConsumer(ctx, js, opts); err != nil {
		return nil, err
	}
	names := natsjs.NamesFor(opts.Prefix)
	out.Consumers = append(out.Consumers, [2]string{names.Approvals, natsjs.NotifyConsumerName})
	// agent serve's keys (its decision key pair, its links' key), made
	// once, so that the agents verify its decisions from the start.
	if _, err := convstore.EnsureServiceKeys(ctx, convstore.OpenConfig{JetStream: js, Provision: opts}); err != nil {
		return nil, err
	}
	// A store written before the pending records or the status index
	// existed gets them now, so that people see its paused conversations
	// and agent serve lists them before their next save or run.
	store, err := convstore.New(ctx, convstore.Config{JetStream: js, Provision: opts})
	if err != nil {
		return nil, err
	}
	if out.Reprojected, err = store.Reproject(ctx); err != nil {
		return nil, err
	}
	tools = slices.Clone(tools)
	slices.Sort(tools)
	for _, name := range slices.Compact(tools) {
		if err := natsjs.EnsureToolConsumers(ctx, js, name, opts); err != nil {
			return nil, err
		}
		out.Consumers = append(out.Consumers, [2]string{names.Tasks, natsjs.TaskConsumerName(name)})
	}
	// Deployments made before the delivery limit moved to the task
	// consumers' metadata kept the max-deliveries advisories in a stream
	// that nothing uses any more.
	if old := strings.ToUpper(names.Prefix) + "_EXHAUSTED"; streamExists(ctx, js, old) {
		out.Obsolete = old
	}
	return out, nil
}

func streamExists(ctx context.Context, js jetstream.JetStream, name string) bool {
	_, err := js.Stream(ctx, name)
	return err == nil
}
