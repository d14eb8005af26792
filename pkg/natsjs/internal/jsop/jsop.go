// Package jsop holds what every JetStream operation of natsjs's packages
// shares: the bound on one request, the retry of a request that reached no
// stream leader, and the wording of an error wrapped in another.
package jsop

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Timeout bounds one publish or JetStream API request (a result's, a
// task's, a look-up): a request the server refuses for lack of permission
// gets no reply.
const Timeout = 10 * time.Second

// transientWait bounds how long an operation that failed because a
// stream had no leader for a moment is retried (a cluster electing one
// after a node died takes a few seconds; a consumer just created on
// another node may not be reachable yet).
const transientWait = 15 * time.Second

// Transient reports whether err says that the request reached no stream
// leader, so that it was not applied and may be tried again.
func Transient(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoHeartbeat)
}

// Retry runs op until it succeeds, fails for another reason, or
// transientWait has passed, backing off from 100 ms to 1 s. It reports
// whether an earlier attempt failed transiently (its effect is unknown).
// what names the operation in the warning logged before each retry.
func Retry(ctx context.Context, log *slog.Logger, what string, op func(context.Context) error) (retried bool, err error) {
	deadline := time.Now().Add(transientWait)
	wait := 100 * time.Millisecond
	for {
		// Each attempt gets its own bound, so that one lost request does
		// not use up the whole wait.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = op(actx)
		cancel()
		if err == nil || !Transient(err) && !(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) || time.Now().Add(wait).After(deadline) {
			return retried, err
		}
		retried = true
		log.Warn(what+": no stream answered; retrying", slog.Duration("in", wait), slog.Any("error", err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return retried, ctx.Err()
		}
		wait = min(2*wait, time.Second)
	}
}

// Nested returns err, an error of natsjs that another of its errors wraps,
// without its "natsjs: " prefix, so that the wrapper's is not repeated
// ("natsjs: worker: ensure stream …", not "natsjs: worker: natsjs: ensure
// stream …"). errors.Is and As see err as it is.
func Nested(err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), "natsjs: ") {
		return err
	}
	return nestedError{err}
}

type nestedError struct{ err error }

func (e nestedError) Error() string { return strings.TrimPrefix(e.err.Error(), "natsjs: ") }

func (e nestedError) Unwrap() error { return e.err }
