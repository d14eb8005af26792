package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/offload-dev/offload/pkg/conversation"
)

// ErrNotRunning is returned by [Service.Cancel] for a conversation no run
// of which is live.
var ErrNotRunning = errors.New("serve: no run of the conversation is live")

// ErrCancelled is the cause of a run interrupted by [Service.Cancel]
// (errors.Is context.Canceled): SIGINT's semantics, its live tasks
// cancelled, its state saved, the run failed with this error.
var ErrCancelled error = cancelledError{}

type cancelledError struct{}

func (cancelledError) Error() string { return "cancelled over the API" }

func (cancelledError) Is(target error) bool { return target == context.Canceled }

// canceller is a store that carries cancel markers to the replica running
// a conversation (convstore.Store).
type canceller interface {
	Held(ctx context.Context, id string) (bool, error)
	RequestCancel(ctx context.Context, id string) error
	WatchCancels(ctx context.Context, fn func(id string)) (stop func(), err error)
}

// Cancel interrupts the live run of conversation id wherever it runs: at
// once on this replica, else by its cancel marker, which the replica
// holding it reads. conversation.ErrNotFound for a conversation agent
// serve never ran, ErrNotRunning when no process holds it.
func (s *Service) Cancel(ctx context.Context, id string) error {
	if r := s.live(id); r != nil {
		r.cancel(ErrCancelled)
		return nil
	}
	c, ok := s.cfg.Session.Store.(canceller)
	si := s.index()
	if !ok || si == nil {
		return ErrNotRunning
	}
	st, err := si.GetStatus(ctx, id)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("%w: %s", conversation.ErrNotFound, id)
	}
	held, err := c.Held(ctx, id)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%w: %s", ErrNotRunning, id)
	}
	return c.RequestCancel(ctx, id)
}

// watchCancels starts reading the cancel markers (Open); the returned
// stop ends it (Close). A store without them is not watched.
func (s *Service) watchCancels(ctx context.Context) (stop func(), err error) {
	c, ok := s.cfg.Session.Store.(canceller)
	if !ok {
		return func() {}, nil
	}
	return c.WatchCancels(ctx, func(id string) {
		if r := s.live(id); r != nil {
			s.log.Info("run cancelled over the API", slog.String("conversation_id", id))
			r.cancel(ErrCancelled)
		}
	})
}
