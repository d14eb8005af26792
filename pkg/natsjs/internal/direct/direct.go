// Package direct reads stored messages by a stream's direct get API
// (allow_direct: answered by any replica of the stream, no consumer
// created) and writes a KV bucket's keys as the messages they are, so
// that a user needs neither the stream's info nor a bound bucket: a
// stream's info lists its subjects, and so every conversation, task and
// key stored in it, which a worker's user must not see of other tools.
package direct

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Msg is a stored message read by a direct get.
type Msg struct {
	// Subject is the subject it was stored on.
	Subject string
	// Data is its payload; Header its own headers, with the direct get's
	// (Nats-Stream, Nats-Sequence, …).
	Data   []byte
	Header nats.Header
	// Seq is its stream sequence; Stored when it was stored.
	Seq    uint64
	Stored time.Time
}

// Last returns the last message stored on subject (no wildcards) in
// stream, by the subject form of the API, `$JS.API.DIRECT.GET.<stream>.<subject>`,
// which needs no request body and so can be granted per subject; nil
// when none is stored. A stream that does not exist, or allows no direct
// gets, answers nats.ErrNoResponders.
func Last(ctx context.Context, nc *nats.Conn, stream, subject string) (*Msg, error) {
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	return answer(m, err, subject)
}

// Next returns the first message stored on filter (wildcards allowed) in
// stream at or after sequence from; nil when there is none.
func Next(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64) (*Msg, error) {
	req, _ := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
	}{from, filter})
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, req)
	return answer(m, err, filter)
}

// answer is the message of a direct get's reply m (nil for a 404).
func answer(m *nats.Msg, err error, filter string) (*Msg, error) {
	if err != nil {
		return nil, fmt.Errorf("natsjs: look %s up: %w", filter, err)
	}
	switch status := m.Header.Get("Status"); status {
	case "":
		return Parse(m, filter)
	case "404":
		return nil, nil
	default:
		return nil, statusError(m, filter)
	}
}

// statusError is the error of a direct get's reply m with a status that
// is no answer.
func statusError(m *nats.Msg, filter string) error {
	if m.Header.Get("Status") == "503" {
		return fmt.Errorf("natsjs: look %s up: %w", filter, nats.ErrNoResponders)
	}
	return fmt.Errorf("natsjs: look %s up: status %s %s", filter, m.Header.Get("Status"), strings.TrimSpace(m.Header.Get("Description")))
}

// Parse returns the stored message of a direct get's reply m, which
// carries one (read for filter: named in errors).
func Parse(m *nats.Msg, filter string) (*Msg, error) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("natsjs: look %s up: sequence %q: %w", filter, m.Header.Get(jetstream.SequenceHeader), err)
	}
	stored, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	return &Msg{Subject: m.Header.Get(jetstream.SubjectHeader), Data: m.Data, Header: m.Header, Seq: seq, Stored: stored}, nil
}

// kvOperation is the header of a KV bucket's delete and purge markers.
const kvOperation = "KV-Operation"

// Deleted reports whether m is a KV bucket's delete or purge marker.
func (m *Msg) Deleted() bool { return m.Header.Get(kvOperation) != "" }

// Keys are a KV bucket's keys read and written as the messages of its
// stream: a key's value is the last message on $KV.<bucket>.<key>,
// written with an expected last subject sequence for compare-and-set,
// read by a direct get; the bucket is never bound (no stream info read).
type Keys struct {
	// JS publishes, NC reads.
	JS jetstream.JetStream
	NC *nats.Conn
	// Stream is the bucket's stream, KV_<bucket>; Bucket the bucket.
	Stream, Bucket string
}

func (k Keys) subject(key string) string { return "$KV." + k.Bucket + "." + key }

// Get returns key's value and revision; jetstream.ErrKeyNotFound when it
// has none (never written, or deleted).
func (k Keys) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	m, err := Last(ctx, k.NC, k.Stream, k.subject(key))
	if err != nil {
		return nil, 0, err
	}
	if m == nil || m.Deleted() {
		return nil, 0, jetstream.ErrKeyNotFound
	}
	return m.Data, m.Seq, nil
}

// GetMsg returns key's value as the message it is stored in (its
// headers with it); nil when it has none (never written, or deleted).
func (k Keys) GetMsg(ctx context.Context, key string) (*Msg, error) {
	m, err := Last(ctx, k.NC, k.Stream, k.subject(key))
	if err != nil || m == nil || m.Deleted() {
		return nil, err
	}
	return m, nil
}

// CreateMsg is Create for a value with headers: m's data and headers are
// stored (its subject is the key's).
func (k Keys) CreateMsg(ctx context.Context, key string, m *nats.Msg) (uint64, error) {
	m.Subject = k.subject(key)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	rev, err := k.publish(ctx, m)
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return rev, err
	}
	last, lerr := Last(ctx, k.NC, k.Stream, k.subject(key))
	if lerr != nil {
		return 0, lerr
	}
	if last == nil || !last.Deleted() {
		return 0, jetstream.ErrKeyExists
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last.Seq, 10)) // over the delete marker
	rev, err = k.publish(ctx, m)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, jetstream.ErrKeyExists
	}
	return rev, err
}

// Put writes key's value, whatever it was, and returns its revision.
func (k Keys) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ack, err := k.JS.Publish(ctx, k.subject(key), value)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Create writes key's value if it has none (never written, or deleted)
// and returns its revision; jetstream.ErrKeyExists when it has one.
func (k Keys) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.Update(ctx, key, value, 0)
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return rev, err
	}
	m, lerr := Last(ctx, k.NC, k.Stream, k.subject(key))
	if lerr != nil {
		return 0, lerr
	}
	if m == nil || !m.Deleted() {
		return 0, jetstream.ErrKeyExists
	}
	rev, err = k.Update(ctx, key, value, m.Seq) // over the delete marker
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, jetstream.ErrKeyExists
	}
	return rev, err
}

// Update writes key's value if its last revision is rev (0: nothing was
// ever written) and returns the new one; jetstream.ErrKeyRevisionMismatch
// when it is not.
func (k Keys) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	m := nats.NewMsg(k.subject(key))
	m.Data = value
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	return k.publish(ctx, m)
}

// Delete deletes key, if its last revision is rev when rev is not 0, and
// returns its delete marker's revision; jetstream.ErrKeyRevisionMismatch
// when it is not.
func (k Keys) Delete(ctx context.Context, key string, rev uint64) (uint64, error) {
	m := nats.NewMsg(k.subject(key))
	m.Header.Set(kvOperation, "DEL")
	if rev != 0 {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	}
	return k.publish(ctx, m)
}

// publish stores m and returns its revision; jetstream.ErrKeyRevisionMismatch
// when its expected last subject sequence is not the key's.
func (k Keys) publish(ctx context.Context, m *nats.Msg) (uint64, error) {
	ack, err := k.JS.PublishMsg(ctx, m)
	if wrongLast(err) {
		return 0, jetstream.ErrKeyRevisionMismatch
	}
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// wrongLast reports whether err is a publish refused for its expected
// last subject sequence (10071; 10164 on a replicated stream).
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
