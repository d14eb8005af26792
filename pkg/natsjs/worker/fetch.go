package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fetcher pulls the tasks of one tool for as many slots as are free: a pull
// request is issued only for slots held, and asks for one task per slot,
// so no task waits in this process while another replica could run it
// (see [slotPool] for how slots rotate among the tools). While tasks are
// waiting in the consumer, a slot freed while requests are outstanding is
// asked for at once, in a request of its own with every other slot then
// free, rather than once they have been answered: it waits one round trip
// for its next task, not that plus the rest of another request's. Without
// a backlog the freed slots are asked for together once the outstanding
// requests end, so that an idle worker keeps few requests waiting. Each
// task pulled is handed, with its slot, to an idle runner of the tool (see
// Worker.run); a runner is a long-lived goroutine that has grown its
// stack once, where a goroutine per task would grow a fresh one for every task (schema
// validation and JSON decoding go deep).
//
// A task is pulled only when a runner is free to start it: a runner whose
// result cannot be published keeps retrying after its slot was given back
// (see handle), and a task handed over to no free runner would wait,
// without in-progress acks, until another replica got it after its ack
// wait.
type fetcher struct {
	w    *Worker
	name string          // the tool's
	ctx  context.Context // its part's fetching
	rs   *runnerPool
	p    *pullRequests
	// freed receives when a slot of the worker has become free.
	freed chan struct{}
	// pl is the long pull requests outstanding, which a fetcher of
	// another tool that has to wait for a slot may preempt (it closes
	// preempt): every request is then abandoned, and their slots given
	// back. Nil while no long request is outstanding.
	long    *longPulls
	preempt chan struct{}
	// guard fires when no message at all came for a request's expiry and
	// a second while requests are outstanding: the server lost them (a
	// restart), and they are abandoned.
	guard *time.Timer
	// backlog is whether tasks were waiting at the last delivery; quiet
	// its opposite, which the tool's pump reads (see slotPool).
	backlog bool
	quiet   atomic.Bool
	// reconn is closed at the next reconnect.
	reconn <-chan struct{}
}

// fetch runs the fetcher of part p on its consumer, handing tasks to rs,
// until p stops fetching (retired, or the worker stopping).
func (w *Worker) fetch(p *toolPart, rs *runnerPool) {
	info := p.consumer.CachedInfo()
	f := &fetcher{w: w, name: p.name, ctx: p.ctx, rs: rs, p: newPullRequests(w.cfg.Conn, info.Stream, info.Name, w.cfg.Concurrency),
		freed: w.slots.watch(), preempt: make(chan struct{}), guard: time.NewTimer(pullWait), reconn: w.reconnected()}
	f.quiet.Store(true)
	defer w.slots.unwatch(f.freed)
	defer f.guard.Stop()
	defer f.abandon()
	f.loop()
}

// unregister forgets the long pulls, ended or abandoned.
func (f *fetcher) unregister() {
	if f.long != nil {
		f.w.slots.endLongPulls(f.long)
		f.long = nil
	}
	select {
	case <-f.preempt: // preempted meanwhile
		f.preempt = make(chan struct{})
	default:
	}
}

// abandon drops every outstanding request and gives their slots back.
func (f *fetcher) abandon() {
	f.unregister()
	for range f.p.abandon() {
		f.w.slots.release()
	}
}

// lostAfter is how long the guard waits for a message while requests are
// outstanding.
func (f *fetcher) lostAfter() time.Duration {
	if f.long != nil { // long requests may be outstanding
		return pullWait + time.Second
	}
	return shortPull + time.Second
}

// handoff hands a pulled task, with its slot, to an idle runner.
func (f *fetcher) handoff(msg jetstream.Msg) {
	f.rs.busy.Add(1)
	select {
	case f.rs.tasks <- msg:
	case <-f.ctx.Done():
		// Stopping: hand the task back at once.
		_ = msg.Nak()
		f.w.slots.release()
		f.rs.done()
	}
}

// loop asks for tasks and hands them on until the worker stops fetching.
func (f *fetcher) loop() {
	w, p, rs := f.w, f.p, f.rs
	for {
		// Ask for every free slot, waiting for one while none is held.
		// While requests are outstanding, freed slots are asked for only
		// when tasks were waiting at the last delivery: otherwise the next
		// task goes to an outstanding request anyway, and the freed slots
		// are asked for together once those requests end. Never more are
		// asked for than runners are free for tasks not asked for yet
		// (spare).
		spare := rs.n - int(rs.busy.Load()) - p.held
		if p.held == 0 && spare <= 0 {
			// Every runner is busy (retrying results): pull nothing.
			select {
			case <-rs.idle:
				continue
			case <-f.ctx.Done():
				return
			}
		}
		asked, ok := f.request(spare)
		if !ok {
			return
		}
		if !asked {
			continue
		}
		select {
		case <-f.reconn:
			// The server may have restarted, forgetting the requests: ask
			// again rather than wait for their expiry, since the answers to
			// new ones would hide that the old ones are lost.
			f.reconn = w.reconnected()
			f.abandon()
		case m := <-p.msgs:
			if !f.receive(m) {
				return
			}
		case <-f.freed:
		case <-rs.idle:
		case <-f.preempt:
			f.abandon()
		case <-f.guard.C:
			if p.held > 0 {
				w.log.Debug("pull requests unanswered; asking again", slog.String("tool", f.name))
				f.abandon()
			}
		case <-f.ctx.Done():
			return
		}
	}
}

// request asks for as many tasks as slots it can take (at most spare
// beyond the one it waits for when it holds none). It reports false in ok
// when the worker stops, and false in asked (after a pause) when the pull
// failed, so that the caller asks again.
func (f *fetcher) request(spare int) (asked, ok bool) {
	w, p := f.w, f.p
	n := 0
	if p.held == 0 {
		if err := w.slots.acquire(f.ctx, f.name); err != nil {
			return false, false
		}
		n = 1
	}
	if room := min(w.cfg.Concurrency-p.held, spare) - n; room > 0 && (n > 0 || f.backlog) {
		n += w.slots.tryAcquire(room)
	}
	if n == 0 {
		return true, true
	}
	long := w.slots.canPullLong(f.name)
	expires := shortPull
	if long {
		expires = pullWait
	}
	if err := p.request(n, expires); err != nil {
		for range n {
			w.slots.release()
		}
		f.abandon()
		w.log.Warn("pull failed", slog.String("tool", f.name), slog.Any("error", err))
		return false, f.sleep(fetchRetryWait)
	}
	if long && f.long == nil {
		ch := f.preempt
		f.long = w.slots.startLongPulls(func() { close(ch) }, f.name, &f.quiet)
	}
	f.guard.Reset(f.lostAfter())
	return true, true
}

// receive takes one message of the pull subscription: a task is handed
// on, the end of a request gives its slots back. It reports false when the
// worker stops.
func (f *fetcher) receive(m *nats.Msg) bool {
	w, p := f.w, f.p
	task, n, err := p.receive(m)
	for range n {
		w.slots.release()
	}
	switch {
	case errors.Is(err, errUncounted) && task != nil:
		_ = task.Nak() // no slot was asked for it
		w.log.Warn("pull failed", slog.String("tool", f.name), slog.Any("error", err))
		f.abandon()
	case err != nil:
		w.log.Warn("pull failed", slog.String("tool", f.name), slog.Any("error", err))
		f.abandon()
		if !errors.Is(err, errUncounted) && !f.sleep(fetchRetryWait) {
			return false
		}
	case task != nil:
		md, err := task.Metadata()
		f.backlog = err == nil && md.NumPending > 0
		f.quiet.Store(!f.backlog)
		f.handoff(task)
	}
	if p.held == 0 {
		f.unregister()
	} else {
		f.guard.Reset(f.lostAfter())
	}
	return true
}

// sleep waits d, or less if the fetcher stops; it reports whether it did
// not stop.
func (f *fetcher) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-f.ctx.Done():
		return false
	}
}
