package natsjs

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// FieldDiff is one configuration field that differs.
type FieldDiff struct {
	// Field is the JSON name of the field (e.g. "max_age").
	Field string
	// Want is the definition's value; Have the existing asset's.
	Want, Have any
}

// IncompatibleError reports an existing stream or consumer whose
// configuration differs from its definition. It wraps
// [ErrIncompatibleStream] or, when Consumer is set, [ErrIncompatibleConsumer].
type IncompatibleError struct {
	// Stream is the stream's name.
	Stream string
	// Consumer is the consumer's name; empty for a stream.
	Consumer string
	// Diffs lists the fields that differ.
	Diffs []FieldDiff
	// Note, when set, says why fields JetStream could update in place
	// were not updated.
	Note string
}

// Error implements error.
func (e *IncompatibleError) Error() string {
	var b strings.Builder
	if e.Consumer == "" {
		fmt.Fprintf(&b, "natsjs: stream %s exists with an incompatible configuration:", e.Stream)
	} else {
		fmt.Fprintf(&b, "natsjs: consumer %s on stream %s exists with an incompatible configuration:", e.Consumer, e.Stream)
	}
	for i, d := range e.Diffs {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " %s: want %v, have %v", d.Field, d.Want, d.Have)
	}
	if e.Note != "" {
		b.WriteString(" (" + e.Note + ")")
	}
	for _, d := range e.Diffs {
		if d.Field == "num_replicas" && e.Consumer == "" {
			// SPEC §5.6: another factor is never changed silently; say how.
			fmt.Fprintf(&b, " (--replicas %v asks for a replication factor of %v, the stream has %v: run without --replicas to use it as it is, or change it with `nats stream edit %s --replicas %v`)",
				d.Want, d.Want, d.Have, e.Stream, d.Want)
		}
	}
	return b.String()
}

// Unwrap returns ErrIncompatibleStream or ErrIncompatibleConsumer.
func (e *IncompatibleError) Unwrap() error {
	if e.Consumer == "" {
		return ErrIncompatibleStream
	}
	return ErrIncompatibleConsumer
}

// updatableStreamFields are the stream limits JetStream updates in place
// (SPEC §5.1), and what happens at them (discard, discard_new_per_subject).
// With discard new, a max_bytes or max_msgs lowered below what the stream
// holds deletes nothing (it refuses new messages until the stream is
// under it again); a lowered max_msgs_per_subject deletes the oldest
// messages of each subject above it, so ensureStream lowers it only when
// no subject is above it.
var updatableStreamFields = map[string]bool{
	"max_msgs": true, "max_bytes": true, "max_age": true, "max_msgs_per_subject": true,
	"max_msg_size": true, "duplicate_window": true, "discard": true, "discard_new_per_subject": true,
	// Sources are added in place: the decisions stream sources the
	// approval timeouts (SPEC §12), also on a server provisioned before.
	"sources": true,
	// What a credential may do to a stream it shares (issue 37): roll-ups
	// refused and purges denied on a stream provisioned before, and the
	// registry's delete markers (which need roll-ups) dropped. A purge
	// denied is never allowed again (the server refuses it): see
	// updatableStream.
	"allow_rollup_hdrs": true, "deny_purge": true, "subject_delete_marker_ttl": true,
}

// updatableStream reports whether JetStream updates field d of a stream
// in place: one of updatableStreamFields, and for deny_purge only from
// false to true.
func updatableStream(d FieldDiff) bool {
	if d.Field == "deny_purge" {
		want, _ := d.Want.(bool)
		return want
	}
	return updatableStreamFields[d.Field]
}

type differ []FieldDiff

func (d *differ) cmp(field string, want, have any) {
	if !reflect.DeepEqual(want, have) {
		*d = append(*d, FieldDiff{Field: field, Want: want, Have: have})
	}
}

// sortedCopy returns a sorted copy of s, nil when s is empty.
func sortedCopy(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// nilIfEmpty returns s, or nil when s is empty.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// orDefault returns v, or def when v is zero (the server's normalisation of
// "unset" limits).
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func diffStream(want, have jetstream.StreamConfig, checkReplicas bool) []FieldDiff {
	var d differ
	d.cmp("subjects", sortedCopy(want.Subjects), sortedCopy(have.Subjects))
	d.cmp("retention", want.Retention.String(), have.Retention.String())
	d.cmp("max_consumers", orDefault(want.MaxConsumers, -1), orDefault(have.MaxConsumers, -1))
	d.cmp("max_msgs", orDefault(want.MaxMsgs, -1), orDefault(have.MaxMsgs, -1))
	d.cmp("max_bytes", orDefault(want.MaxBytes, -1), orDefault(have.MaxBytes, -1))
	d.cmp("max_age", want.MaxAge, have.MaxAge)
	d.cmp("max_msgs_per_subject", orDefault(want.MaxMsgsPerSubject, -1), orDefault(have.MaxMsgsPerSubject, -1))
	d.cmp("max_msg_size", orDefault(want.MaxMsgSize, -1), orDefault(have.MaxMsgSize, -1))
	d.cmp("discard", want.Discard.String(), have.Discard.String())
	d.cmp("discard_new_per_subject", want.DiscardNewPerSubject, have.DiscardNewPerSubject)
	d.cmp("storage", want.Storage.String(), have.Storage.String())
	if checkReplicas {
		d.cmp("num_replicas", orDefault(want.Replicas, 1), orDefault(have.Replicas, 1))
	}
	d.cmp("no_ack", want.NoAck, have.NoAck)
	if want.Duplicates != 0 {
		d.cmp("duplicate_window", want.Duplicates, have.Duplicates)
	}
	d.cmp("sealed", want.Sealed, have.Sealed)
	d.cmp("deny_delete", want.DenyDelete, have.DenyDelete)
	d.cmp("deny_purge", want.DenyPurge, have.DenyPurge)
	d.cmp("allow_rollup_hdrs", want.AllowRollup, have.AllowRollup)
	d.cmp("compression", want.Compression.String(), have.Compression.String())
	d.cmp("allow_direct", want.AllowDirect, have.AllowDirect)
	d.cmp("mirror_direct", want.MirrorDirect, have.MirrorDirect)
	d.cmp("allow_msg_ttl", want.AllowMsgTTL, have.AllowMsgTTL)
	d.cmp("subject_delete_marker_ttl", want.SubjectDeleteMarkerTTL, have.SubjectDeleteMarkerTTL)
	d.cmp("mirror", want.Mirror != nil, have.Mirror != nil)
	d.cmp("allow_msg_schedules", want.AllowMsgSchedules, have.AllowMsgSchedules)
	d.cmp("sources", sourcesOf(want.Sources), sourcesOf(have.Sources))
	return d
}

// sourcesOf is what a stream's sources are compared by: each source's
// stream, filter and subject transforms, in order.
func sourcesOf(src []*jetstream.StreamSource) []string {
	var out []string
	for _, s := range src {
		e := s.Name + " " + s.FilterSubject
		for _, tr := range s.SubjectTransforms {
			e += " " + tr.Source + "→" + tr.Destination
		}
		out = append(out, e)
	}
	return out
}

func diffConsumer(want, have jetstream.ConsumerConfig) []FieldDiff {
	var d differ
	d.cmp("durable_name", want.Durable, have.Durable)
	d.cmp("filter_subject", want.FilterSubject, have.FilterSubject)
	d.cmp("filter_subjects", sortedCopy(want.FilterSubjects), sortedCopy(have.FilterSubjects))
	d.cmp("deliver_policy", want.DeliverPolicy.String(), have.DeliverPolicy.String())
	d.cmp("ack_policy", want.AckPolicy.String(), have.AckPolicy.String())
	wantWait := want.AckWait
	if len(want.BackOff) > 0 {
		wantWait = want.BackOff[0] // the server's rule
	}
	d.cmp("ack_wait", orDefault(wantWait, 30*time.Second), orDefault(have.AckWait, 30*time.Second))
	d.cmp("max_deliver", orDefault(want.MaxDeliver, -1), orDefault(have.MaxDeliver, -1))
	d.cmp("backoff", nilIfEmpty(want.BackOff), nilIfEmpty(have.BackOff))
	d.cmp("replay_policy", want.ReplayPolicy.String(), have.ReplayPolicy.String())
	d.cmp("max_waiting", orDefault(want.MaxWaiting, 512), orDefault(have.MaxWaiting, 512))
	d.cmp("max_ack_pending", orDefault(want.MaxAckPending, 1000), orDefault(have.MaxAckPending, 1000))
	d.cmp("headers_only", want.HeadersOnly, have.HeadersOnly)
	d.cmp("inactive_threshold", want.InactiveThreshold, have.InactiveThreshold)
	d.cmp("mem_storage", want.MemoryStorage, have.MemoryStorage)
	d.cmp("metadata", ownMetadata(want.Metadata), ownMetadata(have.Metadata))
	return d
}

// ownMetadata returns the offload.* keys of a consumer's metadata (the
// server adds keys of its own), or nil when there are none.
func ownMetadata(md map[string]string) map[string]string {
	var own map[string]string
	for k, v := range md {
		if strings.HasPrefix(k, "offload.") {
			if own == nil {
				own = map[string]string{}
			}
			own[k] = v
		}
	}
	return own
}

// updatableConsumerFields are the consumer fields JetStream updates in
// place (SPEC §5.1).
var updatableConsumerFields = map[string]bool{"ack_wait": true, "backoff": true, "max_deliver": true, "max_ack_pending": true, "metadata": true}

// fieldList names the fields of diffs, comma-separated.
func fieldList(diffs []FieldDiff) string {
	out := make([]string, 0, len(diffs))
	for _, d := range diffs {
		out = append(out, d.Field)
	}
	return strings.Join(out, ", ")
}
