package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// PendingPublisher is the [Publisher] of the people's commands: the
// conversation's pending record read from the pending bucket, the
// decision or answer checked against it and published first-wins
// (convstore.Pending.Publish).
type PendingPublisher struct {
	Pending *convstore.Pending
}

// Publish implements [Publisher].
func (p PendingPublisher) Publish(ctx context.Context, kind conversation.ArrivalKind, conv, task string, data []byte) error {
	s, err := p.Pending.Get(ctx, conv)
	if err != nil && !errors.Is(err, conversation.ErrNotFound) {
		return err
	}
	_, err = p.Pending.Publish(ctx, conv, s, kind, task, data)
	return err
}

// Decide implements [Publisher]: d is bound to the call's arguments as
// pending when it carries no args_digest (SPEC §12: the API always sends
// one), then published as [PendingPublisher.Publish] does.
func (p PendingPublisher) Decide(ctx context.Context, conv, task string, d protocol.Decision) error {
	s, err := p.Pending.Get(ctx, conv)
	if err != nil && !errors.Is(err, conversation.ErrNotFound) {
		return err
	}
	if d.ArgsDigest == "" {
		// A task pending nowhere keeps no digest: the check below
		// refuses it (unknown_task or duplicate).
		if digest, err := p.Pending.Digest(ctx, conv, s, task); err == nil {
			d.ArgsDigest = digest
		}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("serve: decision: %w", err)
	}
	_, err = p.Pending.Publish(ctx, conv, s, conversation.ArrivalDecision, task, data)
	return err
}
