package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
	"github.com/offload-dev/offload/pkg/service"
)

// The run events of the service's conversations (SPEC §6.3) live in the
// events stream (natsjs.Names.Events), one subject per conversation,
// <prefix>.event.<conv>, kept a day: any replica serves a conversation's
// Server-Sent Events, whichever replica runs it, and a client resumes
// from its Last-Event-ID (the event's sequence in the stream) on any
// replica.
//
// A replica reads a conversation's events once, however many watch it:
// the first watch of a conversation starts its feed (one ordered
// consumer, of the events stored from then on), the others join it, each
// event fanned out in the process to every watcher's queue, and the last
// watcher to go stops it and deletes its consumer. A watch resuming after
// an event reads those stored since by batches of direct gets (no
// consumer), then follows the feed, each event given once, in order. So
// the consumers of a replica are at most the conversations watched on it,
// which the faces bound (web.Limits: the open streams, per token and in
// all); a watcher that does not read holds no other back: it is ended
// once watchQueue events wait for it (its client resumes from its last
// event).

const (
	// watchQueue bounds the events waiting for one watcher.
	watchQueue = 1024
	// feedInactive is how long the server keeps a feed's consumer that no
	// one reads (a replica that lost its connection; one that stops a
	// feed deletes its consumer at once).
	feedInactive = 30 * time.Second
	// feedDeleteTimeout bounds the deletion of a feed's consumer.
	feedDeleteTimeout = 5 * time.Second
)

// ErrSlowWatcher ends a watch whose watcher let watchQueue events wait:
// its client resumes from the last event it got (Last-Event-ID).
var ErrSlowWatcher = errors.New("serve: the watcher fell behind its conversation's events")

// eventSubject is the subject of conversation conv's events.
func (s *Service) eventSubject(conv string) string {
	return natsjs.NamesFor(s.cfg.Provision.Prefix).Prefix + ".event." + conv
}

// feeds are the conversations' feeds of a replica, by conversation.
type feeds struct {
	mu     sync.Mutex
	m      map[string]*feed
	closed bool // the service stopped: no feed starts
	// batch reads the events stored since a resumed watch's last one.
	batch func(ctx context.Context, stream, filter string, from uint64, n int) ([]*direct.Msg, bool, error)
	// since reads the events stored from a time on (Service.Recent).
	since func(ctx context.Context, stream, filter string, since time.Time, n int) ([]*direct.Msg, bool, error)
}

// feed reads one conversation's events for its watchers.
type feed struct {
	conv    string
	started chan struct{} // closed once it follows its consumer, or failed to (err)
	err     error
	live    bool // it follows its consumer (guarded by feeds.mu)
	cons    jetstream.Consumer
	it      jetstream.MessagesContext
	done    chan struct{} // closed once it has ended and deleted its consumer
	// watchers are guarded by feeds.mu.
	watchers map[*watcher]struct{}
}

// watcher is one watch's queue of the events its feed gave it.
type watcher struct {
	wake chan struct{} // signalled when events are queued or it is ended

	mu    sync.Mutex
	queue []event
	first uint64 // the sequence of the first event given (0: none yet)
	err   error  // why it was ended
}

// event is an event of the stream.
type event struct {
	seq   uint64
	data  json.RawMessage
	final bool
}

// push queues ev, or ends the watcher when watchQueue events wait.
func (w *watcher) push(ev event) {
	w.mu.Lock()
	switch {
	case w.err != nil:
	case len(w.queue) >= watchQueue:
		w.err, w.queue = ErrSlowWatcher, nil
	default:
		w.queue = append(w.queue, ev)
		if w.first == 0 {
			w.first = ev.seq
		}
	}
	w.mu.Unlock()
	w.signal()
}

// end ends the watcher with err once what was queued is taken.
func (w *watcher) end(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns the events queued, and why the watcher was ended.
func (w *watcher) take() ([]event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q, w.err
}

// firstSeq returns the sequence of the first event the feed gave.
func (w *watcher) firstSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// Watch calls fn with each event of conversation conv stored after
// sequence after (0: only those stored from now on), in order, with its
// sequence, until fn returns false, the conversation's next final event
// has been given, or ctx ends. ready, if set, is called once the watch
// has begun: no event stored after it is missed. The watch joins the
// conversation's feed on this replica (one consumer however many watch
// it); the events stored after after and before it began are read by
// direct gets. It ends with ErrSlowWatcher when fn let watchQueue events
// wait, with service.ErrClosed when the service stops.
func (s *Service) Watch(ctx context.Context, conv string, after uint64, ready func(), fn func(seq uint64, event json.RawMessage) bool) error {
	w, leave, err := s.join(ctx, conv)
	if err != nil {
		return fmt.Errorf("serve: watch conversation %s: %w", conv, err)
	}
	defer leave()
	if ready != nil {
		ready()
	}
	last := after
	if after > 0 {
		end, err := s.replay(ctx, conv, w, &last, fn)
		if end || err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
		}
		evs, err := w.take()
		for _, ev := range evs {
			if ev.seq <= last {
				continue // given by the replay
			}
			last = ev.seq
			if !fn(ev.seq, ev.data) || ev.final {
				return nil
			}
		}
		if err != nil {
			return fmt.Errorf("serve: watch conversation %s: %w", conv, err)
		}
	}
}

// recentMax bounds the events [Service.Recent] gives.
const recentMax = 512

// Recent calls fn with the events of conversation conv stored at or after
// since (by the NATS server's clock), in order, until fn returns false,
// recentMax have been given or none more is stored: it does not wait for
// more (implements service.Core). The conversation's page shows with them
// what its saved history does not hold yet: the calls of a live run and
// their progress (SPEC §21).
func (s *Service) Recent(ctx context.Context, conv string, since time.Time, fn func(event json.RawMessage) bool) error {
	stream, subj := natsjs.NamesFor(s.cfg.Provision.Prefix).Events, s.eventSubject(conv)
	msgs, more, err := s.feeds.since(ctx, stream, subj, since, direct.BatchSize)
	for given := 0; ; {
		for _, m := range msgs {
			if !fn(m.Data) {
				return nil
			}
			if given++; given >= recentMax {
				return nil
			}
		}
		if err != nil {
			return fmt.Errorf("serve: events of conversation %s: %w", conv, err)
		}
		if !more || len(msgs) == 0 {
			return nil
		}
		msgs, more, err = s.feeds.batch(ctx, stream, subj, msgs[len(msgs)-1].Seq+1, direct.BatchSize)
	}
}

// replay gives fn the events of conv stored after *last up to the first
// its feed queued for w, read by batches of direct gets, and reports
// whether the watch is over (fn returned false, or a final event was
// given).
func (s *Service) replay(ctx context.Context, conv string, w *watcher, last *uint64, fn func(uint64, json.RawMessage) bool) (bool, error) {
	stream, subj := natsjs.NamesFor(s.cfg.Provision.Prefix).Events, s.eventSubject(conv)
	for {
		first := w.firstSeq()
		if first != 0 && *last+1 >= first {
			return false, nil // the rest is queued
		}
		msgs, more, err := s.feeds.batch(ctx, stream, subj, *last+1, direct.BatchSize)
		for _, m := range msgs {
			*last = m.Seq
			if !fn(m.Seq, m.Data) || isFinal(m.Data) {
				return true, nil
			}
		}
		if err != nil {
			return false, fmt.Errorf("serve: watch conversation %s: %w", conv, err)
		}
		if !more {
			return false, nil
		}
	}
}

// isFinal reports whether data is a final event.
func isFinal(data []byte) bool {
	var head struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(data, &head)
	return head.Type == string(agent.EventFinal)
}

// join returns a new watcher of conv's feed, started when none runs, and
// the function that takes it out (stopping the feed when it was the
// last).
func (s *Service) join(ctx context.Context, conv string) (*watcher, func(), error) {
	fs := &s.feeds
	for {
		fs.mu.Lock()
		if fs.closed {
			fs.mu.Unlock()
			return nil, nil, service.ErrClosed
		}
		f := fs.m[conv]
		if f == nil {
			f = &feed{conv: conv, started: make(chan struct{}), done: make(chan struct{}), watchers: map[*watcher]struct{}{}}
			fs.m[conv] = f
			fs.mu.Unlock()
			err := s.startFeed(ctx, f)
			fs.mu.Lock()
			if err == nil && fs.closed {
				err = service.ErrClosed
				defer s.stopFeed(f)
			}
			if err != nil {
				delete(fs.m, conv)
				f.err = err
				close(f.started)
				fs.mu.Unlock()
				return nil, nil, err
			}
			f.live = true
			close(f.started)
		} else {
			fs.mu.Unlock()
			select {
			case <-f.started:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			fs.mu.Lock()
			if fs.m[conv] != f {
				fs.mu.Unlock()
				if f.err != nil && !errors.Is(f.err, context.Canceled) && !errors.Is(f.err, context.DeadlineExceeded) {
					return nil, nil, f.err
				}
				continue // it ended meanwhile, or its first watcher went before it started: start another
			}
		}
		w := &watcher{wake: make(chan struct{}, 1)}
		f.watchers[w] = struct{}{}
		fs.mu.Unlock()
		return w, func() { s.leave(f, w) }, nil
	}
}

// leave takes w out of f, stopping f when w was its last watcher.
func (s *Service) leave(f *feed, w *watcher) {
	fs := &s.feeds
	fs.mu.Lock()
	delete(f.watchers, w)
	last := len(f.watchers) == 0 && fs.m[f.conv] == f
	if last {
		delete(fs.m, f.conv)
	}
	fs.mu.Unlock()
	if last {
		s.stopFeed(f)
	}
}

// startFeed creates f's consumer (the events of its conversation stored
// from now on) and starts following it.
func (s *Service) startFeed(ctx context.Context, f *feed) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.eventSubject(f.conv)}, DeliverPolicy: jetstream.DeliverNewPolicy,
		InactiveThreshold: feedInactive}
	c, err := s.cfg.Watches.OrderedConsumer(ctx, natsjs.NamesFor(s.cfg.Provision.Prefix).Events, cfg)
	if err != nil {
		return err
	}
	it, err := c.Messages()
	if err != nil {
		s.deleteConsumer(c)
		return err
	}
	f.cons, f.it = c, it
	go s.follow(f)
	return nil
}

// stopFeed stops f and waits until it has ended.
func (s *Service) stopFeed(f *feed) {
	f.it.Stop()
	<-f.done
}

// follow gives each event of f's consumer to every watcher of f until f
// is stopped or its consumer fails; then it ends the watchers left (with
// the failure, or service.ErrClosed) and deletes the consumer.
func (s *Service) follow(f *feed) {
	defer close(f.done)
	fs := &s.feeds
	var err error
	for {
		var m jetstream.Msg
		if m, err = f.it.Next(); err != nil {
			break
		}
		var meta *jetstream.MsgMetadata
		if meta, err = m.Metadata(); err != nil {
			break
		}
		ev := event{seq: meta.Sequence.Stream, data: m.Data(), final: isFinal(m.Data())}
		fs.mu.Lock()
		for w := range f.watchers {
			w.push(ev)
		}
		fs.mu.Unlock()
	}
	f.it.Stop()
	if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		err = service.ErrClosed
	}
	fs.mu.Lock()
	if fs.m[f.conv] == f {
		delete(fs.m, f.conv)
	}
	for w := range f.watchers {
		w.end(err)
	}
	fs.mu.Unlock()
	if !errors.Is(err, service.ErrClosed) {
		s.log.Warn("events: a conversation's feed failed", slog.String("conversation_id", f.conv), slog.Any("error", err))
	}
	s.deleteConsumer(f.cons)
}

// deleteConsumer deletes the consumer of a feed, so that none is left on
// the server once its watchers went.
func (s *Service) deleteConsumer(c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), feedDeleteTimeout)
	defer cancel()
	if err := s.cfg.Watches.DeleteConsumer(ctx, info.Stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Debug("events: a feed's consumer not deleted (the server drops it once inactive)", slog.String("consumer", info.Name), slog.Any("error", err))
	}
}

// closeFeeds stops every feed (Stop): their watches end with
// service.ErrClosed, and no feed starts after.
func (s *Service) closeFeeds() {
	fs := &s.feeds
	fs.mu.Lock()
	fs.closed = true
	var live []*feed
	for _, f := range fs.m {
		if f.live {
			live = append(live, f)
		}
	}
	fs.mu.Unlock()
	for _, f := range live {
		s.stopFeed(f)
	}
}
