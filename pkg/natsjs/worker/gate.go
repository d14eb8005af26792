package worker

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs"
)

// gate is what a worker knows, without a look-up, of whether a tool's
// calls are held as a whole: an operator's pause, a cool-down of the tool
// (SPEC §19). A call of a tool without limits passes the limits rule
// without reading the tool's state while its gate is open; while it is
// closed, the call is held in the queue like a limited one (and reported
// queued). The gate follows every write of the tool's state (a core
// subscription on its key's subject) and every state the worker reads.
type gate struct {
	v atomic.Pointer[gateState]
}

type gateState struct {
	pause *limits.Pause
	cool  time.Time // the tool's own cool-down
	// view is the state last written or read, kept whole: what the limits
	// rule looks at to park a call at once that must wait (a view may be
	// late; the compare-and-set of the state decides). Never changed.
	view *limits.State
}

// closed reports whether the tool's calls are held at now.
func (g *gate) closed(now time.Time) bool {
	if g == nil {
		return false
	}
	s := g.v.Load()
	return s != nil && (s.pause.Active(now) || now.Before(s.cool))
}

// view returns the tool's state as the gate last saw it (nil: none),
// not to be changed.
func (g *gate) view() *limits.State {
	if g == nil {
		return nil
	}
	if s := g.v.Load(); s != nil {
		return s.view
	}
	return nil
}

// set records st (nil: the tool has no state), which is not changed
// after.
func (g *gate) set(st *limits.State) {
	if st == nil {
		g.v.Store(nil)
		return
	}
	s := &gateState{pause: st.Pause, view: st}
	if b := st.Buckets[""]; b != nil {
		s.cool = b.Cool
	}
	g.v.Store(s)
}

// gateClosed reports whether toolName's calls are held as a whole now.
func (w *Worker) gateClosed(toolName string) bool {
	if p := w.partOf(toolName); p != nil {
		return p.gate.closed(time.Now())
	}
	return false
}

// watchGate subscribes g to the writes of the state of the tool named:
// the gate is current from then on, while the connection is up (and again
// at the pump's next read after a reconnect), once the state was read
// (loadGate). A write after which a waiting call may start (a call ended
// or was parked, on any replica) wakes the tool's pump, so that a slot
// freed is taken up at once rather than at the pump's next look.
func (w *Worker) watchGate(name string, g *gate) (*nats.Subscription, error) {
	subject := "$KV." + w.names.LimitsBucket + "." + natsjs.LimitsKey(name)
	sub, err := w.cfg.Conn.Subscribe(subject, func(m *nats.Msg) {
		if op := m.Header.Get("KV-Operation"); op != "" {
			g.set(nil) // deleted or purged
			return
		}
		var st limits.State
		if err := json.Unmarshal(m.Data, &st); err != nil {
			w.log.Debug("a tool state not read", slog.String("tool", name), slog.Any("error", err))
			return
		}
		i, _ := st.Next(time.Now())
		g.set(&st)
		if i >= 0 {
			w.kickPump(name) // a call waits that may start: a slot freed, on any replica
		}
	})
	if err != nil {
		return nil, fmt.Errorf("natsjs: worker: subscribe to the state of tool %s: %w", name, err)
	}
	return sub, nil
}
