package natsjs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload"
	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

const week = 7 * 24 * time.Hour

// TestDefinitionsInSync keeps jetstream/ and this package in step: every
// file parses into the nats.go types with no unknown field, follows the
// naming rules and keeps the retention invariants of SPEC §5.1.
func TestDefinitionsInSync(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"tools", "acme"} {
		t.Run(prefix, func(t *testing.T) {
			cfgs, err := natsjs.StreamConfigs(natsjs.ProvisionOptions{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			names := natsjs.NamesFor(prefix)
			subj := protocol.Subjects{Prefix: prefix}
			streams := byName(t, cfgs)
			want := map[string]string{
				names.Tasks:               subj.All(protocol.KindTask),
				names.Results:             subj.All(protocol.KindResult),
				names.Approvals:           subj.All(protocol.KindApproval),
				names.Decisions:           subj.All(protocol.KindDecision),
				names.Cancel:              subj.All(protocol.KindCancel),
				names.RegistryStream:      "$KV." + names.RegistryBucket + ".>",
				names.Answers:             subj.All(protocol.KindAnswer),
				names.Expiries:            prefix + ".expiry.>",
				names.Wake:                prefix + ".wake.>",
				names.Events:              prefix + ".event.>",
				names.ConversationsStream: "$KV." + names.ConversationsBucket + ".>",
				names.PendingStream:       "$KV." + names.PendingBucket + ".>",
				names.EffectsStream:       "$KV." + names.EffectsBucket + ".>",
				names.ServiceStream:       "$KV." + names.ServiceBucket + ".>",
				names.LimitsStream:        "$KV." + names.LimitsBucket + ".>",
				names.QueueStream:         "$KV." + names.QueueBucket + ".>",
				names.Dead:                subj.All(protocol.KindDead),
				names.Audit:               prefix + ".audit.>",
				names.PendingIndex:        prefix + ".pindex.>",
				names.StatusIndex:         prefix + ".sindex.>",
			}
			// The decisions stream sources the approval timeouts of the
			// same prefix onto the decision subjects (SPEC §12).
			dec := streams[names.Decisions]
			if len(dec.Sources) != 1 || dec.Sources[0].Name != names.Expiries || len(dec.Sources[0].SubjectTransforms) != 1 ||
				dec.Sources[0].SubjectTransforms[0].Source != prefix+".expiry.*.*" ||
				dec.Sources[0].SubjectTransforms[0].Destination != prefix+".decision.{{wildcard(1)}}.{{wildcard(2)}}" {
				t.Errorf("decisions stream's sources: %+v", dec.Sources)
			}
			if !streams[names.Expiries].AllowMsgSchedules || streams[names.Expiries].Discard != jetstream.DiscardOld {
				t.Errorf("expiries stream: %+v", streams[names.Expiries])
			}
			hist, ok := streams[names.HistoriesStream]
			if !ok || !slices.Equal(hist.Subjects, []string{"$O." + names.HistoriesBucket + ".C.>", "$O." + names.HistoriesBucket + ".M.>"}) {
				t.Errorf("histories stream: %+v", hist)
			}
			delete(streams, names.HistoriesStream)
			if len(streams) != len(want) {
				t.Errorf("streams %v, want %v", slices.Sorted(mapsKeys(streams)), slices.Sorted(mapsKeys(want)))
			}
			for name, subject := range want {
				c, ok := streams[name]
				if !ok {
					t.Errorf("no definition of stream %s", name)
					continue
				}
				if !slices.Equal(c.Subjects, []string{subject}) {
					t.Errorf("%s: subjects %v, want [%s]", name, c.Subjects, subject)
				}
				if c.Storage != jetstream.FileStorage || c.Replicas != 1 {
					t.Errorf("%s: storage %v replicas %d", name, c.Storage, c.Replicas)
				}
				if c.Duplicates <= 0 || c.MaxAge > 0 && c.Duplicates > c.MaxAge { // max_age 0: kept (the service's keys)
					t.Errorf("%s: duplicate_window %v must be in (0, max_age %v]", name, c.Duplicates, c.MaxAge)
				}
			}
			tasks := streams[names.Tasks]
			if tasks.Retention != jetstream.WorkQueuePolicy || tasks.Discard != jetstream.DiscardNew ||
				tasks.MaxMsgSize <= 0 || tasks.MaxMsgSize > protocol.DefaultMaxSize || tasks.MaxAge <= 0 {
				t.Errorf("tasks stream: %+v", tasks)
			}
			for _, name := range []string{names.Results, names.Approvals, names.Decisions, names.Cancel, names.Answers} {
				c := streams[name]
				if c.Retention != jetstream.LimitsPolicy {
					t.Errorf("%s: retention %v, want limits", name, c.Retention)
				}
				if c.MaxAge < week {
					t.Errorf("%s: max_age %v < 7 days", name, c.MaxAge)
				}
			}
			if streams[names.Cancel].MaxAge < tasks.MaxAge {
				t.Errorf("cancel max_age %v < tasks max_age %v", streams[names.Cancel].MaxAge, tasks.MaxAge)
			}
			// Approvals and decisions outlive the conversations they concern.
			convs := streams[names.ConversationsStream]
			if convs.MaxAge < 30*24*time.Hour || convs.MaxMsgsPerSubject != 1 || hist.MaxAge < convs.MaxAge {
				t.Errorf("conversations max_age %v (history %d), histories max_age %v", convs.MaxAge, convs.MaxMsgsPerSubject, hist.MaxAge)
			}
			for _, name := range []string{names.Approvals, names.Decisions} {
				if streams[name].MaxAge < convs.MaxAge {
					t.Errorf("%s: max_age %v < the store's retention %v", name, streams[name].MaxAge, convs.MaxAge)
				}
			}
			reg := streams[names.RegistryStream]
			if reg.MaxAge != 30*time.Second || reg.MaxMsgsPerSubject != 1 || !reg.DenyDelete || !reg.AllowDirect {
				t.Errorf("registry stream: %+v", reg)
			}
			// No credential rolls up or purges a stream it shares (issue
			// 37): but for the two whose features need it (message
			// schedules, the object store's metadata and deletes).
			for name, c := range streams {
				need := name == names.Expiries || name == names.HistoriesStream
				if c.AllowRollup != need || c.DenyPurge == need {
					t.Errorf("%s: allow_rollup_hdrs %v, deny_purge %v", name, c.AllowRollup, c.DenyPurge)
				}
			}

			c, err := natsjs.TaskConsumerConfig("search", natsjs.ProvisionOptions{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			if c.Durable != "task_search" || c.FilterSubject != subj.Task("search") || c.AckPolicy != jetstream.AckExplicitPolicy {
				t.Errorf("consumer: %+v", c)
			}
			// The server never gives up on a task (a task it gave up on
			// stays stored, and answering it took a grant over the whole
			// stream): the workers enforce the limit of the metadata.
			limit, ok := natsjs.DeliveryLimit(c)
			if c.MaxDeliver != -1 || !ok || limit <= len(c.BackOff) {
				t.Errorf("consumer max_deliver %d and delivery limit %d (%v): want -1 and a limit beyond the backoff %v", c.MaxDeliver, limit, ok, c.BackOff)
			}
			if len(c.BackOff) > 0 && c.BackOff[0] != c.AckWait {
				t.Errorf("consumer backoff %v must start at ack_wait %v", c.BackOff, c.AckWait)
			}
			if limit <= 1 || c.MaxAckPending <= 0 || c.AckWait <= 0 || c.AckWait > time.Minute || c.InactiveThreshold != 0 {
				t.Errorf("consumer limits: %+v", c)
			}
		})
	}
}

// TestDefinitionFilesRoundTrip checks that the files hold exactly what the
// types hold: a file re-encoded from its parsed value has the same fields.
func TestDefinitionFilesRoundTrip(t *testing.T) {
	t.Parallel()
	files, _ := fs.Glob(offload.Definitions(), "*/*.json")
	if len(files) != 24 {
		t.Errorf("definition files: %v", files)
	}
	for _, file := range files {
		data, _ := fs.ReadFile(offload.Definitions(), file)
		var raw map[string]any
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var typed any = &jetstream.StreamConfig{}
		if strings.HasPrefix(file, "consumers/") {
			typed = &jetstream.ConsumerConfig{}
		}
		if err := json.Unmarshal(data, typed); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		back, _ := json.Marshal(typed)
		var reencoded map[string]any
		_ = json.Unmarshal(back, &reencoded)
		for k, v := range raw {
			// Zero values may be omitted on re-encoding.
			if rv, ok := reencoded[k]; ok && !jsonEqual(rv, v) {
				t.Errorf("%s: field %s = %v in the file, %v after a round trip", file, k, v, rv)
			}
		}
	}
}

// TestRegistryMatchesKVAPI checks the registry stream against the stream
// nats.go's own KV API creates for the same bucket settings.
func TestRegistryMatchesKVAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	kv, err := b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: "tools_registry", History: 1, TTL: 30 * time.Second, LimitMarkerTTL: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = kv
	// Provisioning over the bucket nats.go made must find it compatible.
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatalf("provision over a KV-API bucket: %v", err)
	}
}

func TestProvisionIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	opts := natsjs.ProvisionOptions{} // file storage, as in production
	for range 2 {
		if err := natsjs.Provision(ctx, b.js, opts); err != nil {
			t.Fatal(err)
		}
	}
	names := natsjs.NamesFor("")
	for _, name := range []string{names.Tasks, names.Results, names.Approvals, names.Decisions, names.Cancel, names.RegistryStream} {
		s, err := b.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if s.CachedInfo().Config.Storage != jetstream.FileStorage {
			t.Errorf("%s: storage %v", name, s.CachedInfo().Config.Storage)
		}
	}
	for range 2 {
		c, err := natsjs.EnsureTaskConsumer(ctx, b.js, "search", opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CachedInfo().Config.FilterSubject; got != "tools.task.search" {
			t.Errorf("filter %q", got)
		}
		if got := c.CachedInfo().Config; got.MaxDeliver != -1 || got.Metadata[natsjs.MaxDeliverKey] != "20" {
			t.Errorf("max_deliver %d, metadata %v: want -1 and the delivery limit 20", got.MaxDeliver, got.Metadata)
		}
	}
	// Concurrent provisioning by several processes converges.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	clients := make([]jetstream.JetStream, len(errs))
	for i := range clients {
		clients[i] = b.srv.JetStream(t)
	}
	for i := range errs {
		wg.Go(func() {
			js := clients[i]
			if errs[i] = natsjs.Provision(ctx, js, natsjs.ProvisionOptions{Prefix: "race", MemoryStorage: true}); errs[i] == nil {
				_, errs[i] = natsjs.EnsureTaskConsumer(ctx, js, "t", natsjs.ProvisionOptions{Prefix: "race", MemoryStorage: true})
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("concurrent provision: %v", err)
		}
	}
}

// TestProvisionTightensStreams: a deployment provisioned before issue 37
// (every stream allowing roll-ups and purges, the registry writing delete
// markers) is brought to the definitions in place by Provision, its
// messages kept; a stream whose purges are denied where the definition
// allows them (which the server never undoes) is an IncompatibleError
// saying so.
func TestProvisionTightensStreams(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	opts := natsjs.ProvisionOptions{MemoryStorage: true}
	cfgs, err := natsjs.StreamConfigs(opts)
	if err != nil {
		t.Fatal(err)
	}
	names := natsjs.NamesFor("")
	for _, c := range cfgs {
		c.AllowRollup, c.DenyPurge = true, false
		if c.Name == names.RegistryStream {
			c.SubjectDeleteMarkerTTL = 30 * time.Second
		}
		if _, err := b.js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.js.Publish(ctx, "$KV."+names.EffectsBucket+".sleep.T.0", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := natsjs.Provision(ctx, b.js, opts); err != nil {
		t.Fatalf("provision over the streams of before: %v", err)
	}
	for _, want := range cfgs {
		s, err := b.js.Stream(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		have := s.CachedInfo()
		if have.Config.AllowRollup != want.AllowRollup || have.Config.DenyPurge != want.DenyPurge || have.Config.SubjectDeleteMarkerTTL != 0 {
			t.Errorf("%s after provision: allow_rollup_hdrs %v, deny_purge %v, subject_delete_marker_ttl %v", want.Name,
				have.Config.AllowRollup, have.Config.DenyPurge, have.Config.SubjectDeleteMarkerTTL)
		}
		if want.Name == names.EffectsStream && have.State.Msgs != 1 {
			t.Errorf("the effect ledger lost its entry: %d messages", have.State.Msgs)
		}
	}

	// The histories' purges denied by hand: the object store could no
	// longer delete, and the server never allows them again.
	hist := byName(t, cfgs)[names.HistoriesStream]
	hist.Name, hist.Subjects = "OBJ_other_histories", []string{"$O.other_histories.C.>", "$O.other_histories.M.>"}
	hist.AllowRollup, hist.DenyPurge = false, true
	if _, err := b.js.CreateStream(ctx, hist); err != nil {
		t.Fatal(err)
	}
	err = natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{Prefix: "other", MemoryStorage: true})
	var ie *natsjs.IncompatibleError
	if !errors.As(err, &ie) || ie.Stream != "OBJ_other_histories" || !strings.Contains(err.Error(), "deny_purge: want false, have true") {
		t.Errorf("histories with purges denied: %v", err)
	}
}

func TestProvisionIncompatibleStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	opts := natsjs.ProvisionOptions{MemoryStorage: true}
	cfgs, err := natsjs.StreamConfigs(opts)
	if err != nil {
		t.Fatal(err)
	}
	results := byName(t, cfgs)["TOOLS_RESULTS"]
	results.MaxAge = time.Hour
	results.AllowDirect = false
	if _, err := b.js.CreateStream(ctx, results); err != nil {
		t.Fatal(err)
	}
	err = natsjs.Provision(ctx, b.js, opts)
	if !errors.Is(err, natsjs.ErrIncompatibleStream) {
		t.Fatalf("err = %v, want ErrIncompatibleStream", err)
	}
	var ie *natsjs.IncompatibleError
	if !errors.As(err, &ie) || ie.Stream != "TOOLS_RESULTS" || ie.Consumer != "" {
		t.Fatalf("err = %#v", err)
	}
	var fields []string
	for _, d := range ie.Diffs {
		fields = append(fields, d.Field)
	}
	if !slices.Equal(fields, []string{"max_age", "allow_direct"}) {
		t.Errorf("diff fields %v", fields)
	}
	if !strings.Contains(err.Error(), "max_age: want 168h0m0s, have 1h0m0s") {
		t.Errorf("error text: %v", err)
	}
	// Never silently changed.
	s, _ := b.js.Stream(ctx, "TOOLS_RESULTS")
	if s.CachedInfo().Config.MaxAge != time.Hour {
		t.Errorf("stream was updated")
	}

	// Limits alone are updated in place.
	results.AllowDirect = true
	if _, err := b.js.UpdateStream(ctx, results); err != nil {
		t.Fatal(err)
	}
	if err := natsjs.Provision(ctx, b.js, opts); err != nil {
		t.Fatalf("limits not updated in place: %v", err)
	}
	s, _ = b.js.Stream(ctx, "TOOLS_RESULTS")
	if got := s.CachedInfo().Config.MaxAge; got != byName(t, cfgs)["TOOLS_RESULTS"].MaxAge {
		t.Errorf("max_age after the update: %v", got)
	}

	// Storage counts too: file definitions against memory streams.
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{Prefix: "other", MemoryStorage: true}); err != nil {
		t.Fatal(err)
	}
	err = natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{Prefix: "other"})
	if !errors.As(err, &ie) || ie.Diffs[0].Field != "storage" {
		t.Errorf("storage mismatch: %v", err)
	}
}

func TestProvisionReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{MemoryStorage: true, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	// Replicas are compared only when asked for; a single server cannot
	// run R3, so the mismatch is checked without creating anything.
	err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{MemoryStorage: true, Replicas: 3})
	var ie *natsjs.IncompatibleError
	if !errors.As(err, &ie) || ie.Diffs[0].Field != "num_replicas" {
		t.Fatalf("replicas mismatch: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "num_replicas: want 3, have 1") || !strings.Contains(msg, "--replicas 3") || !strings.Contains(msg, "nats stream edit "+ie.Stream+" --replicas 3") {
		t.Errorf("the error does not say which factor the stream has and how to change it: %v", err)
	}
	// Without --replicas an R1 stream is used as it is.
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{MemoryStorage: true}); err != nil {
		t.Errorf("without replicas: %v", err)
	}
}

func TestProvisionPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	acme := natsjs.ProvisionOptions{Prefix: "acme", MemoryStorage: true}
	for _, opts := range []natsjs.ProvisionOptions{acme, {MemoryStorage: true}} {
		if err := natsjs.Provision(ctx, b.js, opts); err != nil {
			t.Fatal(err)
		}
	}
	s, err := b.js.Stream(ctx, "ACME_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Subjects; !slices.Equal(got, []string{"acme.task.>"}) {
		t.Errorf("subjects %v", got)
	}

	subj := protocol.Subjects{Prefix: "acme"}
	task := protocol.NewID()
	ack, err := b.js.Publish(ctx, subj.Task("search"), []byte(`{}`), jetstream.WithMsgID(task))
	if err != nil || ack.Stream != "ACME_TASKS" {
		t.Fatalf("publish: %+v %v", ack, err)
	}
	// Dedup window: the same task ID is dropped.
	ack, err = b.js.Publish(ctx, subj.Task("search"), []byte(`{}`), jetstream.WithMsgID(task))
	if err != nil || !ack.Duplicate {
		t.Fatalf("duplicate publish: %+v %v", ack, err)
	}
	c, err := natsjs.EnsureTaskConsumer(ctx, b.js, "search", acme)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject() != "acme.task.search" {
		t.Errorf("subject %q", msg.Subject())
	}
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
	// The default prefix's consumer of the same tool is a different one.
	if _, err := natsjs.EnsureTaskConsumer(ctx, b.js, "search", natsjs.ProvisionOptions{MemoryStorage: true}); err != nil {
		t.Fatal(err)
	}

	kv, err := natsjs.EnsureRegistry(ctx, b.js, acme)
	if err != nil {
		t.Fatal(err)
	}
	if kv.Bucket() != "acme_registry" {
		t.Errorf("bucket %q", kv.Bucket())
	}
}

func TestEnsureTaskConsumerOverridesAndIncompatible(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fast := natsjs.ProvisionOptions{MemoryStorage: true, AckWait: 500 * time.Millisecond, MaxDeliver: 2}
	if err := natsjs.Provision(ctx, b.js, fast); err != nil {
		t.Fatal(err)
	}
	c, err := natsjs.EnsureTaskConsumer(ctx, b.js, "slow", fast)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	if limit, _ := natsjs.DeliveryLimit(cfg); cfg.AckWait != 500*time.Millisecond || limit != 2 || cfg.MaxDeliver != -1 || len(cfg.BackOff) != 0 || !cfg.MemoryStorage {
		t.Errorf("overrides not applied: %+v", cfg)
	}

	// The short AckWait gives a prompt redelivery of an unacknowledged task.
	if _, err := b.js.Publish(ctx, "tools.task.slow", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	m1, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m2, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	md1, _ := m1.Metadata()
	md2, _ := m2.Metadata()
	if md1.NumDelivered != 1 || md2.NumDelivered != 2 {
		t.Errorf("deliveries %d, %d", md1.NumDelivered, md2.NumDelivered)
	}
	_ = m2.Ack()

	// Under the production template, the fields JetStream can update (ack
	// wait, backoff, max deliveries, max ack pending, the delivery limit in
	// the metadata) are updated in place.
	prod := natsjs.ProvisionOptions{MemoryStorage: true}
	c, err = natsjs.EnsureTaskConsumer(ctx, b.js, "slow", prod)
	if err != nil {
		t.Fatalf("updatable fields not updated in place: %v", err)
	}
	want, err := natsjs.TaskConsumerConfig("slow", prod)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Config; got.AckWait != want.AckWait || got.MaxDeliver != want.MaxDeliver ||
		!slices.Equal(got.BackOff, want.BackOff) || got.MaxAckPending != want.MaxAckPending || got.Metadata[natsjs.MaxDeliverKey] != "20" {
		t.Errorf("after the update: ack_wait %v backoff %v max_deliver %d max_ack_pending %d, want %v %v %d %d",
			got.AckWait, got.BackOff, got.MaxDeliver, got.MaxAckPending, want.AckWait, want.BackOff, want.MaxDeliver, want.MaxAckPending)
	}

	// A consumer of a deployment made before the limit moved to the
	// metadata (the server's max_deliver 20, no metadata) is updated in
	// place: the server no longer gives up, the workers answer.
	legacy := want
	legacy.Durable, legacy.Name, legacy.FilterSubject = "task_legacy", "task_legacy", "tools.task.legacy"
	legacy.MaxDeliver, legacy.Metadata = 20, nil
	if _, err := b.js.CreateConsumer(ctx, "TOOLS_TASKS", legacy); err != nil {
		t.Fatal(err)
	}
	lc, err := natsjs.EnsureTaskConsumer(ctx, b.js, "legacy", prod)
	if err != nil {
		t.Fatalf("a legacy consumer not updated in place: %v", err)
	}
	if got := lc.CachedInfo().Config; got.MaxDeliver != -1 || got.Metadata[natsjs.MaxDeliverKey] != "20" {
		t.Errorf("legacy consumer after the update: max_deliver %d, metadata %v", got.MaxDeliver, got.Metadata)
	}

	// A field JetStream cannot update is still an incompatible configuration.
	other := want
	other.Durable, other.Name, other.FilterSubject = "task_other", "task_other", "tools.task.other"
	other.MaxWaiting = 100
	other.MaxAckPending = 7
	if _, err := b.js.CreateConsumer(ctx, "TOOLS_TASKS", other); err != nil {
		t.Fatal(err)
	}
	_, err = natsjs.EnsureTaskConsumer(ctx, b.js, "other", prod)
	var ie *natsjs.IncompatibleError
	if !errors.Is(err, natsjs.ErrIncompatibleConsumer) || !errors.As(err, &ie) || ie.Consumer != "task_other" {
		t.Fatalf("err = %v", err)
	}
	var fields []string
	for _, d := range ie.Diffs {
		fields = append(fields, d.Field)
	}
	if !slices.Equal(fields, []string{"max_waiting", "max_ack_pending"}) {
		t.Errorf("diff fields %v", fields)
	}
	if info, err := b.js.Consumer(ctx, "TOOLS_TASKS", "task_other"); err != nil || info.CachedInfo().Config.MaxAckPending != 7 {
		t.Errorf("an incompatible consumer was changed: %v", err)
	}
}

// The task consumer's definition recovers fast (SPEC §5.3): an ack wait of at
// most 10 s (kept alive by in-progress acks), room for hand-backs.
func TestTaskConsumerDefinitionRecoversFast(t *testing.T) {
	t.Parallel()
	cfg, err := natsjs.TaskConsumerConfig("x", natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AckWait > 10*time.Second || (len(cfg.BackOff) > 0 && cfg.BackOff[0] > 10*time.Second) {
		t.Errorf("ack wait %v, backoff %v: a killed replica's task waits more than 10 s", cfg.AckWait, cfg.BackOff)
	}
	if limit, _ := natsjs.DeliveryLimit(cfg); limit < 10 {
		t.Errorf("delivery limit %d: hand-backs need at least 10", limit)
	}
}

func TestEnsureTaskConsumerErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := natsjs.EnsureTaskConsumer(ctx, b.js, "bad.name", natsjs.ProvisionOptions{}); !errors.Is(err, tool.ErrInvalidName) {
		t.Errorf("bad tool: %v", err)
	}
	if _, err := natsjs.EnsureTaskConsumer(ctx, b.js, "t", natsjs.ProvisionOptions{Prefix: "a.b"}); !errors.Is(err, protocol.ErrInvalidPrefix) {
		t.Errorf("bad prefix: %v", err)
	}
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{Prefix: "a b"}); !errors.Is(err, protocol.ErrInvalidPrefix) {
		t.Errorf("bad prefix: %v", err)
	}
	if _, err := natsjs.EnsureTaskConsumer(ctx, b.js, "t", natsjs.ProvisionOptions{}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("no stream: %v", err)
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	kv, err := natsjs.EnsureRegistry(ctx, b.js, natsjs.ProvisionOptions{MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "search.w1", []byte(`{"name":"search"}`)); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "search.w1")
	if err != nil || string(e.Value()) != `{"name":"search"}` {
		t.Fatalf("get: %v %v", e, err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.TTL() != 30*time.Second || st.History() != 1 {
		t.Errorf("status: ttl %v history %d %v", st.TTL(), st.History(), err)
	}
	// Binding again (as Provision would) is fine.
	if _, err := natsjs.EnsureRegistry(ctx, b.js, natsjs.ProvisionOptions{MemoryStorage: true}); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidDefinitions(t *testing.T) {
	t.Parallel()
	good, _ := fs.ReadFile(offload.Definitions(), "streams/TOOLS_RESULTS.json")
	for name, fsys := range map[string]fstest.MapFS{
		"empty":         {},
		"unknown field": {"streams/TOOLS_X.json": {Data: []byte(`{"name":"TOOLS_X","subjects":["tools.x.>"],"max_agee":1}`)}},
		"not JSON":      {"streams/TOOLS_X.json": {Data: []byte(`{`)}},
		"trailing":      {"streams/TOOLS_X.json": {Data: []byte(`{"name":"TOOLS_X","subjects":["tools.x.>"]} {}`)}},
		"file name":     {"streams/OTHER.json": {Data: good}},
		"bad name":      {"streams/X.json": {Data: []byte(`{"name":"X","subjects":["tools.x.>"]}`)}},
		"bad subject":   {"streams/TOOLS_X.json": {Data: []byte(`{"name":"TOOLS_X","subjects":["other.>"]}`)}},
		"no subject":    {"streams/TOOLS_X.json": {Data: []byte(`{"name":"TOOLS_X"}`)}},
	} {
		if _, err := natsjs.StreamConfigs(natsjs.ProvisionOptions{FS: fsys}); !errors.Is(err, natsjs.ErrInvalidDefinition) {
			t.Errorf("%s: err = %v, want ErrInvalidDefinition", name, err)
		}
	}
	for name, data := range map[string]string{
		"missing":      "",
		"no template":  `{"durable_name":"fixed","filter_subject":"tools.task.fixed"}`,
		"unknown":      `{"durable_name":"task_<tool>","filter_subject":"tools.task.<tool>","ack_wiat":1}`,
		"wrong filter": `{"durable_name":"task_<tool>","filter_subject":"tools.task"}`,
		// The server must never give up on a task, and the workers need a limit.
		"server's limit": `{"durable_name":"task_<tool>","filter_subject":"tools.task.<tool>","max_deliver":20,"metadata":{"offload.max_deliver":"20"}}`,
		"no limit":       `{"durable_name":"task_<tool>","filter_subject":"tools.task.<tool>","max_deliver":-1}`,
		"bad limit":      `{"durable_name":"task_<tool>","filter_subject":"tools.task.<tool>","max_deliver":-1,"metadata":{"offload.max_deliver":"0"}}`,
	} {
		fsys := fstest.MapFS{}
		if data != "" {
			fsys["consumers/task.json"] = &fstest.MapFile{Data: []byte(data)}
		}
		if _, err := natsjs.TaskConsumerConfig("t", natsjs.ProvisionOptions{FS: fsys}); !errors.Is(err, natsjs.ErrInvalidDefinition) {
			t.Errorf("%s: err = %v, want ErrInvalidDefinition", name, err)
		}
	}
}

func TestConnect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &offloadtest.Output{}
	nc, err := natsjs.Connect(b.srv.URL(), natsjs.ConnectOptions{Name: "test", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if nc.Opts.MaxReconnect != -1 || !nc.Opts.RetryOnFailedConnect || nc.Opts.Name != "test" {
		t.Errorf("options: %+v", nc.Opts)
	}

	// With nothing listening the connection still comes up, reconnecting.
	nc2, err := natsjs.Connect("nats://127.0.0.1:1", natsjs.ConnectOptions{ReconnectWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	nc2.Close()

	// Connection events are logged.
	b.srv.NATS().Shutdown()
	b.srv.NATS().WaitForShutdown()
	logs.WaitFor(t, "nats disconnected")
}

// TestDefinitionsApplyWithNATSCLI applies the files with the nats CLI, as the
// README tells operators to, and checks that provisioning then finds every
// stream and the consumer compatible. Skipped when `nats` is not on PATH,
// unless OFFLOAD_REQUIRE_NATS_CLI is set (make test sets it): then a missing
// CLI fails the test.
func TestDefinitionsApplyWithNATSCLI(t *testing.T) {
	t.Parallel()
	cli := natstest.NATSCLI(t)
	b := setup(t)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"--server", b.srv.URL(), "--no-context"}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nats %v: %v\n%s", args, err, out)
		}
	}
	dir := t.TempDir()
	files, _ := fs.Glob(offload.Definitions(), "streams/*.json")
	for _, file := range files {
		data, _ := fs.ReadFile(offload.Definitions(), file)
		path := filepath.Join(dir, filepath.Base(file))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		run("stream", "add", "--config", path)
	}
	for file, stream := range map[string]string{"consumers/task.json": "TOOLS_TASKS"} {
		tmpl, _ := fs.ReadFile(offload.Definitions(), file)
		path := filepath.Join(dir, "search_"+filepath.Base(file))
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(tmpl), "<tool>", "search")), 0o600); err != nil {
			t.Fatal(err)
		}
		run("consumer", "add", stream, "--config", path)
	}

	ctx := context.Background()
	js := b.srv.JetStream(t)
	if err := natsjs.Provision(ctx, js, natsjs.ProvisionOptions{Replicas: 1}); err != nil {
		t.Fatalf("provision over CLI-made streams: %v", err)
	}
	if _, err := natsjs.EnsureTaskConsumer(ctx, js, "search", natsjs.ProvisionOptions{}); err != nil {
		t.Fatalf("consumer made by the CLI: %v", err)
	}
	if _, err := natsjs.EnsureRegistry(ctx, js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatalf("registry made by the CLI: %v", err)
	}
}

// limitDefs returns definitions holding only a decisions stream written
// with the given limits (the shape of TOOLS_DECISIONS, scaled down).
func limitDefs(t *testing.T, maxBytes, perSubject int64, discard string) fstest.MapFS {
	t.Helper()
	cfgs, err := natsjs.StreamConfigs(natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(byName(t, cfgs)["TOOLS_DECISIONS"])
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["max_bytes"], m["max_msgs_per_subject"], m["discard"], m["discard_new_per_subject"] = maxBytes, perSubject, discard, discard == "new"
	data, _ := json.Marshal(m)
	return fstest.MapFS{"streams/TOOLS_DECISIONS.json": &fstest.MapFile{Data: data}}
}

// The limits of an existing deployment are updated in place (issue 30
// finding 5): a stream written without limits and discard old takes the
// definition's max_bytes, per-subject limit and discard new; what it
// holds above the new max_bytes stays (discard new deletes nothing) and
// the next publish is refused with the limit named (a *LimitError); a
// per-subject limit below what a subject holds is not applied, since the
// server would delete that subject's oldest messages (the decision that
// won): an IncompatibleError names the subject.
func TestProvisionLowersLimitsWithoutLosingData(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{FS: limitDefs(t, -1, -1, "old")}); err != nil {
		t.Fatal(err)
	}
	subj := protocol.Subjects{}
	conv, task := protocol.NewID(), protocol.NewID()
	for range 5 {
		if _, err := b.js.Publish(ctx, subj.Decision(conv, task), bytes.Repeat([]byte("d"), 100)); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() uint64 {
		s, err := b.js.Stream(ctx, "TOOLS_DECISIONS")
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.Msgs
	}
	// A per-subject limit below what a subject holds: refused, nothing lost.
	err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{FS: limitDefs(t, 300, 2, "new")})
	var ie *natsjs.IncompatibleError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), subj.Decision(conv, task)+" holds 5 messages") {
		t.Fatalf("lowering max_msgs_per_subject below a subject's count: %v", err)
	}
	if n := stored(); n != 5 {
		t.Fatalf("%d decisions left, want 5", n)
	}
	// max_bytes below what the stream holds, per-subject limit above it.
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{FS: limitDefs(t, 300, 16, "new")}); err != nil {
		t.Fatal(err)
	}
	s, _ := b.js.Stream(ctx, "TOOLS_DECISIONS")
	if c := s.CachedInfo().Config; c.MaxBytes != 300 || c.MaxMsgsPerSubject != 16 || c.Discard != jetstream.DiscardNew || !c.DiscardNewPerSubject {
		t.Fatalf("not updated in place: %+v", c)
	}
	if n := stored(); n != 5 {
		t.Fatalf("%d decisions left after lowering max_bytes, want 5", n)
	}
	_, err = b.js.Publish(ctx, subj.Decision(protocol.NewID(), protocol.NewID()), []byte(`{"approved":true}`))
	var le *natsjs.LimitError
	if err = natsjs.Limited(err); !errors.As(err, &le) || le.Limit != natsjs.LimitBytes || !errors.Is(err, natsjs.ErrLimitReached) {
		t.Fatalf("publish over max_bytes: %v", err)
	}
	if n := stored(); n != 5 {
		t.Fatalf("%d decisions after the refused one, want 5", n)
	}
}

// Limited names each limit a stream refuses a publish at, from the
// server's own answers.
func TestLimitedNamesTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: "L", Subjects: []string{"l.>"}, Storage: jetstream.MemoryStorage,
		MaxBytes: 1 << 10, MaxMsgSize: 200, MaxMsgsPerSubject: 2, DiscardNewPerSubject: true, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: "M", Subjects: []string{"m.>"}, Storage: jetstream.MemoryStorage,
		MaxMsgs: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	limit := func(subject string, data []byte) string {
		_, err := b.js.Publish(ctx, subject, data)
		var le *natsjs.LimitError
		if errors.As(natsjs.Limited(err), &le) {
			return le.Limit
		}
		if err != nil {
			t.Fatalf("publish on %s: %v", subject, err)
		}
		return ""
	}
	got := []string{
		limit("l.big", make([]byte, 300)),
		limit("l.a", []byte("1")), limit("l.a", []byte("2")), limit("l.a", []byte("3")),
		limit("m.a", []byte("1")), limit("m.b", []byte("2")),
	}
	for i := range 20 {
		if l := limit("l.s"+strconv.Itoa(i), make([]byte, 150)); l != "" {
			got = append(got, l)
			break
		}
	}
	want := []string{natsjs.LimitMsgSize, "", "", natsjs.LimitMsgsPerSubject, "", natsjs.LimitMsgs, natsjs.LimitBytes}
	if !slices.Equal(got, want) {
		t.Errorf("limits %q, want %q", got, want)
	}
	if err := natsjs.Limited(errors.New("other")); err.Error() != "other" {
		t.Errorf("another error changed: %v", err)
	}
}

// A decisions stream provisioned before approval timeouts (SPEC §12)
// takes the definition's source of the expiries stream in place, what it
// holds kept.
func TestProvisionAddsTheExpiriesSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	old := limitDefs(t, 134217728, 16, "new")
	var m map[string]any
	if err := json.Unmarshal(old["streams/TOOLS_DECISIONS.json"].Data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "sources")
	old["streams/TOOLS_DECISIONS.json"].Data, _ = json.Marshal(m)
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{FS: old}); err != nil {
		t.Fatal(err)
	}
	subj := protocol.Subjects{}
	if _, err := b.js.Publish(ctx, subj.Decision(protocol.NewID(), protocol.NewID()), []byte(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := natsjs.Provision(ctx, b.js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := b.js.Stream(ctx, "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo(); len(c.Config.Sources) != 1 || c.Config.Sources[0].Name != "TOOLS_EXPIRIES" || c.State.Msgs != 1 {
		t.Fatalf("decisions stream after provisioning: sources %+v, %d messages", c.Config.Sources, c.State.Msgs)
	}
}
