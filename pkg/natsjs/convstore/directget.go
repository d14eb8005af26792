package convstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	var m *nats.Msg
	var err error
	if next {
		req, _ := json.Marshal(struct {
			Seq     uint64 `json:"seq"`
			NextFor string `json:"next_by_subj"`
		}{from, filter})
		m, err = nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, req)
	} else {
		m, err = nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+filter, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: look %s up: %w", filter, err)
	}
	switch status := m.Header.Get("Status"); {
	case status == "404":
		return nil, nil
	case status != "":
		return nil, fmt.Errorf("natsjs: look %s up: status %s %s", filter, status, strings.TrimSpace(m.Header.Get("Description")))
	}
	return storedOf(m, filter)
}

// storedOn reports whether stream holds a message on subject: a direct
// get of the subject's last message, which needs neither the stream's
// info nor a consumer (the people roles have neither).
func storedOn(ctx context.Context, nc *nats.Conn, stream, subject string) (bool, error) {
	m, err := directGet(ctx, nc, stream, subject, 0, false)
	return m != nil, err
}

// storedOf is the stored message a direct get answered with m.
func storedOf(m *nats.Msg, filter string) (*storedMsg, error) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("natsjs: look %s up: sequence %q: %w", filter, m.Header.Get(jetstream.SequenceHeader), err)
	}
	stored, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	return &storedMsg{subject: m.Header.Get(jetstream.SubjectHeader), data: m.Data, header: m.Header, seq: seq, stored: stored}, nil
}
