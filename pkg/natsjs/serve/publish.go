package serve

import (
	"context"
	"errors"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
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
