package convstore

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
)

// storedMsg is a message read by a direct get: its subject, data,
// headers (the message's own), stream sequence and storing time.
type storedMsg struct {
	subject string
	data    []byte
	header  nats.Header
	seq     uint64
	stored  time.Time
}

// directGet asks stream's direct get API (allow_direct, answered by any
// replica of the stream, no consumer created) for one message: the
// first on filter (wildcards allowed) at or after sequence from when
// next is set, else the last on subject filter. It returns nil when
// there is none. The subject form `$JS.API.DIRECT.GET.<stream>.<subject>`
// needs no request body, which the people's roles are granted for their
// subjects alone.
func directGet(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64, next bool) (*storedMsg, error) {
	var m *direct.Msg
	var err error
	if next {
		m, err = direct.Next(ctx, nc, stream, filter, from)
	} else {
		m, err = direct.Last(ctx, nc, stream, filter)
	}
	if err != nil || m == nil {
		return nil, err
	}
	return fromDirect(m), nil
}

// fromDirect is the storedMsg of m.
func fromDirect(m *direct.Msg) *storedMsg {
	return &storedMsg{subject: m.Subject, data: m.Data, header: m.Header, seq: m.Seq, stored: m.Stored}
}

// storedOn reports whether stream holds a message on subject: a direct
// get of the subject's last message, which needs neither the stream's
// info nor a consumer (the people roles have neither).
func storedOn(ctx context.Context, nc *nats.Conn, stream, subject string) (bool, error) {
	m, err := directGet(ctx, nc, stream, subject, 0, false)
	return m != nil, err
}
