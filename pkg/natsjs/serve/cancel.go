package serve

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/service"
)

// Cancel interrupts the live run of conversation id wherever it runs: at
// once on this replica, else by its cancel marker, which the replica
// holding it reads. conversation.ErrNotFound for a conversation agent
// serve never ran, service.ErrNotRunning when no process holds it.
func (s *Service) Cancel(ctx context.Context, id string) error {
	if r := s.live(id); r != nil {
		r.cancel(service.ErrCancelled)
		return nil
	}
	st, err := s.cfg.Store.GetStatus(ctx, id)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("%w: %s", conversation.ErrNotFound, id)
	}
	held, err := s.cfg.Store.Held(ctx, id)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%w: %s", service.ErrNotRunning, id)
	}
	return s.cfg.Store.RequestCancel(ctx, id)
}

// watchCancels starts reading the cancel markers (Start); the returned
// stop ends it (Stop).
func (s *Service) watchCancels(ctx context.Context) (stop func(), err error) {
	return s.cfg.Store.WatchCancels(ctx, func(id string) {
		if r := s.live(id); r != nil {
			s.log.Info("run cancelled over the API", slog.String("conversation_id", id))
			r.cancel(service.ErrCancelled)
		}
	})
}
