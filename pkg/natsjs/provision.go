package natsjs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// ProvisionOptions configures [Provision], [EnsureTaskConsumer] and
// [EnsureRegistry]. The zero value provisions the definitions as written.
type ProvisionOptions struct {
	// Prefix is the subject prefix. Defaults to [protocol.DefaultPrefix].
	Prefix string
	// Replicas, when positive, sets num_replicas of every stream (and is
	// then compared with existing streams). Zero keeps the definitions'
	// value for new streams and accepts any replica count on existing ones.
	Replicas int
	// MemoryStorage stores new streams and consumers in memory (tests).
	MemoryStorage bool
	// AckWait, when positive, replaces the task consumer's ack_wait and drops
	// its backoff, so that redeliveries come every AckWait (tests).
	AckWait time.Duration
	// MaxDeliver, when positive, replaces the task consumer's delivery
	// limit (its metadata's [MaxDeliverKey]; see [DeliveryLimit]).
	MaxDeliver int
	// FS holds the definitions (streams/*.json, consumers/task.json).
	// Defaults to the jetstream/ directory embedded by the module's root
	// package ([offload.Definitions]).
	FS fs.FS
}

func (o ProvisionOptions) prefix() string {
	if o.Prefix == "" {
		return defPrefix
	}
	return o.Prefix
}

func (o ProvisionOptions) fsys() fs.FS {
	if o.FS == nil {
		return offload.Definitions()
	}
	return o.FS
}

// createTimeout bounds a look-up or create request: one the server refuses
// for lack of permission gets no reply.
const createTimeout = 5 * time.Second

// strictUnmarshal decodes a definition, refusing unknown fields.
func strictUnmarshal(name string, data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidDefinition, name, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: trailing data", ErrInvalidDefinition, name)
	}
	return nil
}

// StreamConfigs returns the stream configurations of the definitions,
// rewritten for opts.Prefix and with the overrides of opts applied, sorted
// by name.
func StreamConfigs(opts ProvisionOptions) ([]jetstream.StreamConfig, error) {
	if err := protocol.ValidatePrefix(opts.prefix()); err != nil {
		return nil, err
	}
	fsys := opts.fsys()
	files, err := fs.Glob(fsys, "streams/*.json")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidDefinition, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no streams/*.json", ErrInvalidDefinition)
	}
	var out []jetstream.StreamConfig
	for _, file := range files {
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidDefinition, err)
		}
		var cfg jetstream.StreamConfig
		if err := strictUnmarshal(file, data, &cfg); err != nil {
			return nil, err
		}
		if want := strings.TrimSuffix(path.Base(file), ".json"); cfg.Name != want {
			return nil, fmt.Errorf("%w: %s: name %q does not match the file name", ErrInvalidDefinition, file, cfg.Name)
		}
		if err := rewriteStream(&cfg, opts.prefix()); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidDefinition, file, err)
		}
		if opts.Replicas > 0 {
			cfg.Replicas = opts.Replicas
		}
		if opts.MemoryStorage {
			cfg.Storage = jetstream.MemoryStorage
		}
		out = append(out, cfg)
	}
	slices.SortFunc(out, func(a, b jetstream.StreamConfig) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func rewriteStream(cfg *jetstream.StreamConfig, prefix string) error {
	switch {
	case strings.HasPrefix(cfg.Name, defStreamPre):
		cfg.Name = strings.ToUpper(prefix) + "_" + strings.TrimPrefix(cfg.Name, defStreamPre)
	case strings.HasPrefix(cfg.Name, defKVStreamPre):
		cfg.Name = "KV_" + prefix + "_" + strings.TrimPrefix(cfg.Name, defKVStreamPre)
	case strings.HasPrefix(cfg.Name, defOBJStreamPre):
		cfg.Name = "OBJ_" + prefix + "_" + strings.TrimPrefix(cfg.Name, defOBJStreamPre)
	default:
		return fmt.Errorf("name %q starts with none of %s, %s, %s", cfg.Name, defStreamPre, defKVStreamPre, defOBJStreamPre)
	}
	if len(cfg.Subjects) == 0 {
		return fmt.Errorf("no subjects")
	}
	// A source is a stream of the same prefix: its name and the
	// transforms of its subjects follow the prefix too.
	for _, src := range cfg.Sources {
		if !strings.HasPrefix(src.Name, defStreamPre) {
			return fmt.Errorf("source %q does not start with %s", src.Name, defStreamPre)
		}
		src.Name = strings.ToUpper(prefix) + "_" + strings.TrimPrefix(src.Name, defStreamPre)
		for i, tr := range src.SubjectTransforms {
			if !strings.HasPrefix(tr.Source, defPrefix+".") || !strings.HasPrefix(tr.Destination, defPrefix+".") {
				return fmt.Errorf("source %s: transform %s → %s is not of the %s prefix", src.Name, tr.Source, tr.Destination, defPrefix)
			}
			src.SubjectTransforms[i].Source = prefix + "." + strings.TrimPrefix(tr.Source, defPrefix+".")
			src.SubjectTransforms[i].Destination = prefix + "." + strings.TrimPrefix(tr.Destination, defPrefix+".")
		}
	}
	for i, s := range cfg.Subjects {
		switch {
		case strings.HasPrefix(s, defPrefix+"."):
			cfg.Subjects[i] = prefix + "." + strings.TrimPrefix(s, defPrefix+".")
		case strings.HasPrefix(s, defKVSubjPre):
			cfg.Subjects[i] = "$KV." + prefix + "_" + strings.TrimPrefix(s, defKVSubjPre)
		case strings.HasPrefix(s, defOBJSubjPre):
			cfg.Subjects[i] = "$O." + prefix + "_" + strings.TrimPrefix(s, defOBJSubjPre)
		default:
			return fmt.Errorf("subject %q starts with none of %s., %s, %s", s, defPrefix, defKVSubjPre, defOBJSubjPre)
		}
	}
	return nil
}

// MaxDeliverKey is the task consumer's metadata key that holds a task's
// delivery limit, in decimal. The server's own max_deliver is -1: the
// server never gives up on a task (it would leave it stored, and answering
// it would take a grant over the whole tasks stream); a worker that
// receives a delivery past the limit answers DeliveriesExhausted without
// running the task, and terminates it (SPEC §5.3).
const MaxDeliverKey = "offload.max_deliver"

// DeliveryLimit returns the delivery limit of a task consumer's
// configuration (its metadata's [MaxDeliverKey]), and false when it has
// none or an invalid one.
func DeliveryLimit(cfg jetstream.ConsumerConfig) (int, bool) {
	n, err := strconv.Atoi(cfg.Metadata[MaxDeliverKey])
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// TaskConsumerConfig returns the task consumer configuration of toolName
// from the consumers/task.json template, rewritten for opts.Prefix and with
// the overrides of opts applied. The template must have max_deliver -1
// and a positive delivery limit in its metadata ([MaxDeliverKey]).
func TaskConsumerConfig(toolName string, opts ProvisionOptions) (jetstream.ConsumerConfig, error) {
	cfg, err := consumerTemplate("consumers/task.json", toolName, opts, TaskConsumerName,
		func(prefix, toolName string) string { return protocol.Subjects{Prefix: prefix}.Task(toolName) })
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if _, ok := DeliveryLimit(cfg); !ok || cfg.MaxDeliver != -1 {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: consumers/task.json: want max_deliver -1 and a positive delivery limit in metadata %q, have %d and %q",
			ErrInvalidDefinition, MaxDeliverKey, cfg.MaxDeliver, cfg.Metadata[MaxDeliverKey])
	}
	if opts.AckWait > 0 {
		cfg.AckWait = opts.AckWait
		cfg.BackOff = nil
	}
	if opts.MaxDeliver > 0 {
		cfg.Metadata[MaxDeliverKey] = strconv.Itoa(opts.MaxDeliver)
	}
	return cfg, nil
}

// consumerTemplate reads the consumer template file for toolName, checks
// its durable name (durable(toolName)) and filter subject (filter of the
// default prefix), and rewrites the filter for opts.Prefix.
func consumerTemplate(file, toolName string, opts ProvisionOptions, durable func(toolName string) string, filter func(prefix, toolName string) string) (jetstream.ConsumerConfig, error) {
	if err := tool.ValidateName(toolName); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if err := protocol.ValidatePrefix(opts.prefix()); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	data, err := fs.ReadFile(opts.fsys(), file)
	if err != nil {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: %w", ErrInvalidDefinition, err)
	}
	// Substitute the placeholder the way an operator does with sed.
	data = bytes.ReplaceAll(data, []byte(toolholder), []byte(toolName))
	var cfg jetstream.ConsumerConfig
	if err := strictUnmarshal(file, data, &cfg); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if cfg.Durable != durable(toolName) || cfg.FilterSubject != filter(defPrefix, toolName) {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: %s: want durable_name %q and filter_subject %q, have %q and %q",
			ErrInvalidDefinition, file, durable(toolholder), filter(defPrefix, toolholder), cfg.Durable, cfg.FilterSubject)
	}
	cfg.FilterSubject = filter(opts.prefix(), toolName)
	if opts.MemoryStorage {
		cfg.MemoryStorage = true
	}
	return cfg, nil
}

// Provision creates every stream of the definitions for opts.Prefix (tasks,
// results, approvals, decisions, cancel and the registry's backing stream),
// idempotently: a missing stream is created; an existing one that differs
// only in its limits (max_msgs, max_bytes, max_age, max_msgs_per_subject,
// max_msg_size, duplicate_window), its sources, or in what a credential
// may do to it (allow_rollup_hdrs, deny_purge set, the registry's
// subject_delete_marker_ttl), which JetStream updates in place, is updated
// to the definition (a user that may not update it is told that an admin
// runs `agent provision`); any other difference (replicas only when
// opts.Replicas is set) is an [*IncompatibleError] wrapping
// [ErrIncompatibleStream], and the stream is left as it is.
func Provision(ctx context.Context, js jetstream.JetStream, opts ProvisionOptions) error {
	cfgs, err := StreamConfigs(opts)
	if err != nil {
		return err
	}
	for _, cfg := range cfgs {
		if _, err := ensureStream(ctx, js, cfg, opts.Replicas > 0); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, checkReplicas bool) (jetstream.Stream, error) {
	lctx, cancel := context.WithTimeout(ctx, createTimeout)
	s, err := js.Stream(lctx, want.Name)
	cancel()
	if pe := refused(ctx, js, "$JS.API.STREAM.INFO."+want.Name, err); pe != nil {
		return nil, fmt.Errorf("natsjs: look stream %s up: %w", want.Name, pe)
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cctx, cancel := context.WithTimeout(ctx, createTimeout)
		s, err = js.CreateStream(cctx, want)
		cancel()
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Created meanwhile by another process: compare below.
			s, err = js.Stream(ctx, want.Name)
		}
		if pe := refused(ctx, js, "$JS.API.STREAM.CREATE."+want.Name, err); pe != nil {
			return nil, fmt.Errorf("natsjs: stream %s is missing and this user may not create it (an admin runs `agent provision`): %w", want.Name, pe)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: ensure stream %s: %w", want.Name, withCause(ctx, err))
	}
	diffs := diffStream(want, s.CachedInfo().Config, checkReplicas)
	if len(diffs) == 0 {
		return s, nil
	}
	for _, d := range diffs {
		if !updatableStream(d) {
			return nil, &IncompatibleError{Stream: want.Name, Diffs: diffs}
		}
	}
	if !checkReplicas {
		want.Replicas = s.CachedInfo().Config.Replicas // an update must not change them
	}
	if err := checkPerSubjectLowered(ctx, s, want); err != nil {
		return nil, err
	}
	if want.Discard == jetstream.DiscardOld && s.CachedInfo().Config.Discard == jetstream.DiscardNew && lowered(want, s.CachedInfo().Config) {
		// Discard old with a lowered limit deletes what is above it.
		return nil, &IncompatibleError{Stream: want.Name, Diffs: diffs}
	}
	uctx, cancel := context.WithTimeout(ctx, createTimeout)
	s, err = js.UpdateStream(uctx, want)
	cancel()
	if pe := refused(ctx, js, "$JS.API.STREAM.UPDATE."+want.Name, err); pe != nil {
		return nil, fmt.Errorf("natsjs: stream %s differs from its definition (%s) and this user may not update it (an admin runs `agent provision`): %w",
			want.Name, fieldList(diffs), pe)
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: update stream %s: %w", want.Name, withCause(ctx, err))
	}
	if diffs := diffStream(want, s.CachedInfo().Config, checkReplicas); len(diffs) > 0 {
		return nil, &IncompatibleError{Stream: want.Name, Diffs: diffs}
	}
	return s, nil
}

// checkPerSubjectLowered refuses an update that lowers the stream's
// max_msgs_per_subject below what a subject holds: the server would delete
// the subject's oldest messages (for decisions and answers, the first,
// which wins). The fix is the operator's: an [*IncompatibleError] naming
// the subject.
func checkPerSubjectLowered(ctx context.Context, s jetstream.Stream, want jetstream.StreamConfig) error {
	have := s.CachedInfo().Config
	if want.MaxMsgsPerSubject <= 0 || have.MaxMsgsPerSubject > 0 && want.MaxMsgsPerSubject >= have.MaxMsgsPerSubject {
		return nil
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return fmt.Errorf("natsjs: stream %s: count the messages per subject before lowering max_msgs_per_subject: %w", want.Name, err)
	}
	for _, subject := range slices.Sorted(maps.Keys(info.State.Subjects)) {
		if n := info.State.Subjects[subject]; n > uint64(want.MaxMsgsPerSubject) {
			return &IncompatibleError{Stream: want.Name, Diffs: []FieldDiff{{Field: "max_msgs_per_subject", Want: want.MaxMsgsPerSubject, Have: orDefault(have.MaxMsgsPerSubject, -1)}},
				Note: fmt.Sprintf("subject %s holds %d messages: the server would delete its oldest to lower the limit; remove what is not wanted (nats stream rmm %s) or keep the stream as it is", subject, n, want.Name)}
		}
	}
	return nil
}

// lowered reports whether want lowers one of have's byte or message
// limits.
func lowered(want, have jetstream.StreamConfig) bool {
	low := func(w, h int64) bool { return w > 0 && (h <= 0 || w < h) }
	return low(want.MaxBytes, have.MaxBytes) || low(want.MaxMsgs, have.MaxMsgs)
}

// EnsureTaskConsumer creates or binds the durable pull consumer of toolName
// on the tasks stream of opts.Prefix ([TaskConsumerConfig]), shared by every
// worker replica serving the tool. The tasks stream must exist (see
// [Provision]). An existing consumer that differs only in fields JetStream
// can update in place (ack_wait, backoff, max_deliver, max_ack_pending,
// the metadata's offload.* keys: a consumer made before the delivery limit
// moved to the metadata gets max_deliver -1 and the limit) is
// updated to the definition; one that differs in any other field is an
// [*IncompatibleError] wrapping [ErrIncompatibleConsumer], and is left as
// it is.
func EnsureTaskConsumer(ctx context.Context, js jetstream.JetStream, toolName string, opts ProvisionOptions) (jetstream.Consumer, error) {
	want, err := TaskConsumerConfig(toolName, opts)
	if err != nil {
		return nil, err
	}
	return ensureConsumer(ctx, js, NamesFor(opts.prefix()).Tasks, toolName, want)
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream, toolName string, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	lctx, cancel := context.WithTimeout(ctx, createTimeout)
	c, err := js.Consumer(lctx, stream, want.Durable)
	cancel()
	if pe := refused(ctx, js, "$JS.API.CONSUMER.INFO."+stream+"."+want.Durable, err); pe != nil {
		return nil, fmt.Errorf("natsjs: look consumer %s on %s up: %w", want.Durable, stream, pe)
	}
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cctx, cancel := context.WithTimeout(ctx, createTimeout)
		c, err = js.CreateConsumer(cctx, stream, want)
		cancel()
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = js.Consumer(ctx, stream, want.Durable)
		}
		if pe := refused(ctx, js, "$JS.API.CONSUMER.CREATE."+stream+"."+want.Durable, err); pe != nil {
			return nil, fmt.Errorf("natsjs: consumer %s on %s is missing and this user may not create it (an admin runs `agent provision --tools %s`): %w", want.Durable, stream, toolName, pe)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: ensure consumer %s on %s: %w", want.Durable, stream, withCause(ctx, err))
	}
	diffs := diffConsumer(want, c.CachedInfo().Config)
	if len(diffs) == 0 {
		return c, nil
	}
	for _, d := range diffs {
		if !updatableConsumerFields[d.Field] {
			return nil, &IncompatibleError{Stream: stream, Consumer: want.Durable, Diffs: diffs}
		}
	}
	if c, err = js.UpdateConsumer(ctx, stream, want); err != nil {
		return nil, fmt.Errorf("natsjs: update consumer %s on %s: %w", want.Durable, stream, err)
	}
	if diffs := diffConsumer(want, c.CachedInfo().Config); len(diffs) > 0 {
		return nil, &IncompatibleError{Stream: stream, Consumer: want.Durable, Diffs: diffs}
	}
	return c, nil
}

// EnsureRegistry ensures the registry bucket's backing stream (as
// [Provision] does) and binds the bucket <prefix>_registry: key
// <tool>.<worker-id>, TTL 30 s.
func EnsureRegistry(ctx context.Context, js jetstream.JetStream, opts ProvisionOptions) (jetstream.KeyValue, error) {
	names := NamesFor(opts.prefix())
	return EnsureBucket(ctx, js, opts, names.RegistryStream, names.RegistryBucket)
}

// EnsureBucket ensures the KV bucket's backing stream (as [Provision]
// does: created when missing and the user may, else it must exist) and
// binds the bucket.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, opts ProvisionOptions, stream, bucket string) (jetstream.KeyValue, error) {
	if err := EnsureStreams(ctx, js, opts, stream); err != nil {
		return nil, err
	}
	return BindBucket(ctx, js, bucket)
}

// BindBucket binds the KV bucket, whose stream exists.
func BindBucket(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("natsjs: bind KV bucket %s: %w", bucket, err)
	}
	return kv, nil
}

// EnsureStreams ensures the named streams of the definitions (names as
// [NamesFor] gives them for opts.Prefix), as [Provision] does for all of
// them: created when missing and allowed, updated in place when only their
// limits differ, else an [*IncompatibleError] or an error naming what the
// user may not do.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, opts ProvisionOptions, names ...string) error {
	cfgs, err := StreamConfigs(opts)
	if err != nil {
		return err
	}
	for _, name := range names {
		i := slices.IndexFunc(cfgs, func(c jetstream.StreamConfig) bool { return c.Name == name })
		if i < 0 {
			return fmt.Errorf("%w: no definition of stream %s", ErrInvalidDefinition, name)
		}
		if _, err := ensureStream(ctx, js, cfgs[i], opts.Replicas > 0); err != nil {
			return err
		}
	}
	return nil
}

// EnsureToolConsumers ensures the durable consumer of toolName, its task
// consumer ([EnsureTaskConsumer]), as a worker serving it does.
func EnsureToolConsumers(ctx context.Context, js jetstream.JetStream, toolName string, opts ProvisionOptions) error {
	_, err := EnsureTaskConsumer(ctx, js, toolName, opts)
	return err
}
