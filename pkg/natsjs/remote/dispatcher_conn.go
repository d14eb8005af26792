package remote

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/taskmem"
	"github.com/offload-dev/offload/pkg/protocol"
)

// watchConn follows the connection's status until status is closed: when
// the server stays away for ServerLostAfter, or the connection closes,
// every waiting call fails with natsjs.ErrServerLost (no result can reach it), and
// dispatches fail until the connection is back; when it is back, the
// calls that wait look their results up in the stream (recoverCalls).
func (d *Dispatcher) watchConn(status chan nats.Status, stopped chan<- struct{}) {
	defer close(stopped)
	var timer *time.Timer
	var timeout <-chan time.Time
	var since time.Time
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer, timeout = nil, nil
		}
	}
	defer stopTimer()
	for {
		select {
		case s, ok := <-status:
			if !ok {
				return
			}
			switch s {
			case nats.CONNECTED:
				stopTimer()
				d.mu.Lock()
				d.lost = nil
				d.mu.Unlock()
				// Back from a disconnection: what the results
				// consumer delivered into the cut connection, or
				// missed, is in the stream.
				d.recoverCalls()
			case nats.DISCONNECTED, nats.RECONNECTING:
				if timer == nil {
					since = time.Now()
					timer = time.NewTimer(d.cfg.ServerLostAfter)
					timeout = timer.C
				}
			case nats.CLOSED:
				stopTimer()
				d.serverLost(fmt.Errorf("%w: the connection is closed", natsjs.ErrServerLost))
			}
		case <-timeout:
			timer, timeout = nil, nil
			if d.cfg.Conn.IsConnected() {
				continue
			}
			d.serverLost(fmt.Errorf("%w: %s unreachable for %s", natsjs.ErrServerLost,
				d.url, time.Since(since).Round(time.Second)))
		}
	}
}

// serverLost fails every waiting call with err and refuses dispatches
// until the connection is back.
func (d *Dispatcher) serverLost(err error) {
	d.mu.Lock()
	if !d.life.Running() {
		d.mu.Unlock()
		return
	}
	d.lost = err
	waiting := d.pending
	d.pending = make(map[string]*Handle)
	for id, h := range waiting {
		d.rememberLocked(id, h.task.ConversationID, taskmem.Detached)
	}
	d.mu.Unlock()
	if len(waiting) > 0 {
		d.log.Error("calls failed: the NATS server is lost", slog.Int("calls", len(waiting)), slog.Any("error", err))
	}
	for _, h := range waiting {
		d.setPending(h.task.Mode, -1)
		d.observe(h.task, "server_lost", h.started)
		h.finish(protocol.Result{}, err)
	}
}
