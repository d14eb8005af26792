package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/natsjs/internal/jsop"
	"github.com/offload-dev/offload/pkg/tool"
)

// The connection watcher: a disconnect may lose cancels (core NATS), so
// after every reconnect the worker catches up with the cancel stream
// before it trusts its cancel index again.

// watchConn follows the connection's status: a disconnect withdraws the
// cancel index's trust; once connected again, the worker catches up. It
// runs until unwatchConn, at the very end of a stop, so that tasks still
// running in the grace period get their cancels too.
func (w *Worker) watchConn() {
	ch := w.cfg.Conn.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CONNECTED)
	ctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	w.status, w.statusCancel = ch, cancel
	w.mu.Unlock()
	w.watcher.Add(1)
	go func() {
		defer w.watcher.Done()
		// Status events may be dropped when the channel is full: the
		// reconnect counter is checked too.
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		caughtUp := w.cfg.Conn.Stats().Reconnects
		behind := false
		for {
			select {
			case s, ok := <-ch:
				if !ok {
					return
				}
				if s != nats.CONNECTED {
					w.cancels.distrust()
					behind = true
					continue
				}
				w.signalReconnect()
			case <-tick.C:
				if r := w.cfg.Conn.Stats().Reconnects; r != caughtUp && !behind {
					w.cancels.distrust()
					behind = true
					w.signalReconnect()
				}
				if !behind {
					continue
				}
			}
			if w.cfg.Conn.Status() != nats.CONNECTED {
				continue
			}
			reconnects := w.cfg.Conn.Stats().Reconnects
			if err := w.catchUp(ctx, w.cancels.epoch()); err != nil {
				w.log.Warn("cancel catch-up after reconnect failed; retrying", slog.Any("error", err))
				continue // the next tick retries
			}
			caughtUp, behind = reconnects, false
			w.log.Info("caught up with cancels after reconnect")
		}
	}()
}

// reconnected returns a channel closed at the next reconnect: the server
// may have restarted and forgotten the pull requests waiting there (see
// fetch).
func (w *Worker) reconnected() <-chan struct{} { return *w.reconn.Load() }

// signalReconnect closes the channel reconnected returned, and replaces it.
func (w *Worker) signalReconnect() {
	ch := make(chan struct{})
	close(*w.reconn.Swap(&ch))
}

// unwatchConn stops listening to the connection's status and waits for the
// watcher to end.
func (w *Worker) unwatchConn() {
	w.mu.Lock()
	ch, cancel := w.status, w.statusCancel
	w.status, w.statusCancel = nil, nil
	w.mu.Unlock()
	if ch != nil {
		cancel()
		w.cfg.Conn.RemoveStatusListener(ch) // closes ch: the watcher returns
	}
	w.watcher.Wait()
}

// catchUp makes the cancel index trustworthy again: once the cancel
// subscription is known to be live on the server (a flush), every cancel
// stored from then on reaches it, so tasks stored after the tasks stream's
// current last sequence need no look-up; the held tasks, whose cancels may
// have been missed, are looked up now.
func (w *Worker) catchUp(ctx context.Context, gen uint64) error {
	ctx, cancel := context.WithTimeout(ctx, jsop.Timeout)
	defer cancel()
	if err := w.cfg.Conn.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	info, err := w.tasksStream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream info %s: %w", w.names.Tasks, err)
	}
	for _, fl := range w.cancels.held() {
		found, err := w.lookupCancel(ctx, fl.task)
		if err != nil {
			return err
		}
		if found {
			w.log.Info("cancel found after reconnect", slog.String("task_id", fl.task.TaskID))
			fl.cancel(tool.ErrCancelled)
		}
	}
	if !w.cancels.trust(info.State.LastSeq, gen) {
		return errors.New("disconnected again")
	}
	return nil
}
