package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// storeCmd is what the commands that read or answer a stored
// conversation without running it (pending, approve, deny, answer,
// history) share: the connection flags and the store.
type storeCmd struct {
	e env
	f *runFlags
}

// openedStore is a connection to the conversation store.
type openedStore struct {
	*convstore.Conversations
	c *conn
}

// open connects (on the embedded default, to the store's server, started
// when none runs) and opens the conversation store.
func (s storeCmd) open(ctx context.Context) (*openedStore, error) {
	if err := protocol.ValidatePrefix(s.f.prefix); err != nil {
		return nil, usageErr("--prefix: %v", err)
	}
	log := newLogger(s.e.stderr, s.f.verbose)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e := s.e
	if !s.f.verbose {
		// The server's URL and CLI options matter to a run, not here.
		e.stderr = io.Discard
	}
	c, err := connect(ctx, e, s.f, log, nil)
	if err != nil {
		return nil, err
	}
	ctx, stopWatch := c.refusals.Watch(ctx) // a permission lacking ends it at once
	defer stopWatch()
	convs, err := openConversations(ctx, c.nc, s.f, nil, log)
	if err != nil {
		c.close()
		return nil, err
	}
	return &openedStore{Conversations: convs, c: c}, nil
}

// load returns the stored conversation with what arrived for it in the
// streams (recorded in the copy only: nothing is saved). An unknown
// conversation exits 1.
func (o *openedStore) load(ctx context.Context, id string) (*conversation.State, error) {
	if _, err := protocol.ParseID(id); err != nil {
		return nil, usageErr("--conversation: %v", err)
	}
	st, err := o.Load(ctx, id)
	if errors.Is(err, conversation.ErrNotFound) {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("conversation %s is unknown", id)}
	}
	if err != nil {
		return nil, &exitError{code: exitFailed, err: err}
	}
	return st, nil
}

// openConversation opens the store and loads the conversation --conversation
// names (see open and load); the caller closes o.c when done with it.
func (s storeCmd) openConversation(ctx context.Context) (*openedStore, *conversation.State, error) {
	o, err := s.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := o.load(ctx, s.f.conversation)
	if err != nil {
		o.c.close()
		return nil, nil, err
	}
	return o, st, nil
}

// openConversations opens the conversations of the flags' prefix on nc
// (see convstore.Open), the inbox's duplicate refusals logged at Info.
func openConversations(ctx context.Context, nc *nats.Conn, f *runFlags, am *metrics.Agent, log *slog.Logger) (*convstore.Conversations, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return convstore.Open(ctx, convstore.OpenConfig{JetStream: js, Provision: f.conn.ProvisionOptions(f.prefix), Metrics: am,
		Logger: log, QuietDuplicates: true, Identities: f.identities})
}
