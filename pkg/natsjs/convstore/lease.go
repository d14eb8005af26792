package convstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
)

// leaseValue is the value of a conversation's lease key.
type leaseValue struct {
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expires_at"`
}

// errHeld says the lease is held by someone else (until is when it lapses).
type errHeld struct {
	holder string
	until  time.Time
}

func (e *errHeld) Error() string { return "held by " + e.holder }

// Claim implements [conversation.Store]: the lease is the key lease.<id>,
// whose value names the holder and when the lease lapses; it is taken with
// compare-and-set (created, or updated once lapsed), renewed every third of
// LeaseTTL, and deleted on release. A claim waits for the holder's release
// (watching the key) or for its lease to lapse, at most LeaseTTL. Leases
// compare the holders' clocks: keep the machines' clocks in sync.
func (s *Store) Claim(ctx context.Context, id, holder string) (conversation.Lease, error) {
	if err := checkConvID(id); err != nil {
		return nil, err
	}
	key := leaseKeyPre + id
	ttl := s.cfg.LeaseTTL
	giveUp := time.Now().Add(ttl)
	w, err := s.kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("natsjs: claim conversation %s: %w", id, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		rev, err := s.tryClaim(ctx, key, holder, ttl)
		if err == nil {
			return s.leased(id, holder, rev, ttl), nil
		}
		var held *errHeld
		if !errors.As(err, &held) {
			return nil, fmt.Errorf("natsjs: claim conversation %s: %w", id, err)
		}
		now := time.Now()
		if !now.Before(giveUp) {
			return nil, &conversation.ClaimedError{ID: id, Holder: held.holder, Until: held.until}
		}
		wake := held.until.Sub(now)
		if left := giveUp.Sub(now); left < wake {
			wake = left
		}
		timer := time.NewTimer(max(wake, time.Millisecond))
		select {
		case <-w.Updates():
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
		timer.Stop()
	}
}

// TryClaim takes the conversation's lease like [Store.Claim], but without
// waiting: a lease another holder has is a *conversation.ClaimedError at
// once (what `agent serve`'s wakes use: a message for a conversation in
// work is delivered again later).
func (s *Store) TryClaim(ctx context.Context, id, holder string) (conversation.Lease, error) {
	if err := checkConvID(id); err != nil {
		return nil, err
	}
	key := leaseKeyPre + id
	rev, err := s.tryClaim(ctx, key, holder, s.cfg.LeaseTTL)
	var held *errHeld
	if errors.As(err, &held) {
		return nil, &conversation.ClaimedError{ID: id, Holder: held.holder, Until: held.until}
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: claim conversation %s: %w", id, err)
	}
	return s.leased(id, holder, rev, s.cfg.LeaseTTL), nil
}

// leased returns the lease of conversation id this process took at the
// key's revision rev, renewed from now on, and records that it holds it.
func (s *Store) leased(id, holder string, rev uint64, ttl time.Duration) *convLease {
	s.hold(id)
	l := &convLease{s: s, id: id, key: leaseKeyPre + id, holder: holder, rev: rev, ttl: ttl,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go l.renew(time.Now().Add(ttl)) // the lease owns the renewal: Release stops it (stop, done)
	return l
}

// tryClaim takes the lease if it is free or lapsed; errHeld when not.
func (s *Store) tryClaim(ctx context.Context, key, holder string, ttl time.Duration) (uint64, error) {
	// The key's last message, a lease or the delete marker of a released
	// one: the update at its revision takes the lease in one more round
	// trip (the bucket's Get hides a marker's revision, and its Create
	// then needs two more).
	seen, err := s.readLease(ctx, key)
	if err != nil {
		return 0, err
	}
	if seen.Held {
		return 0, &errHeld{holder: seen.Holder, until: seen.Until}
	}
	return s.takeLease(ctx, key, holder, ttl, seen.Seq)
}

// takeLease takes the lease of key at the key's revision seq (free,
// released, lapsed or unreadable there), unless someone else just did
// (errHeld).
func (s *Store) takeLease(ctx context.Context, key, holder string, ttl time.Duration, seq uint64) (uint64, error) {
	value, err := json.Marshal(leaseValue{Holder: holder, ExpiresAt: time.Now().Add(ttl).UTC()})
	if err != nil {
		return 0, err
	}
	rev, err := s.kv.Update(ctx, key, value, seq)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, &errHeld{holder: "another process", until: time.Now()} // raced: look again
	}
	return rev, err
}

// convLease is a held lease, renewed by its own goroutine until released.
type convLease struct {
	s          *Store
	id, key    string
	holder     string
	ttl        time.Duration
	rev        uint64 // owned by renew until done is closed
	lost, stop chan struct{}
	done       chan struct{}
	lostOnce   sync.Once
	stopOnce   sync.Once
}

func (l *convLease) Lost() <-chan struct{} { return l.lost }

func (l *convLease) markLost(err error) {
	l.lostOnce.Do(func() {
		l.s.log.Error("conversation lease lost", slog.String("conversation_id", l.id), slog.Any("error", err))
		close(l.lost)
	})
}

// renew refreshes the lease every third of its TTL until stopped; when a
// renewal is refused (someone took the lease) or none succeeded before the
// lease lapsed, the lease is lost.
func (l *convLease) renew(expires time.Time) {
	defer close(l.done)
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		value, _ := json.Marshal(leaseValue{Holder: l.holder, ExpiresAt: time.Now().Add(l.ttl).UTC()})
		ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
		rev, err := l.s.kv.Update(ctx, l.key, value, l.rev)
		cancel()
		switch {
		case err == nil:
			l.rev, expires = rev, time.Now().Add(l.ttl)
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
			l.markLost(fmt.Errorf("%w: %w", conversation.ErrLeaseLost, err))
			return
		case time.Now().After(expires):
			l.markLost(fmt.Errorf("%w: not renewed in time: %w", conversation.ErrLeaseLost, err))
			return
		default:
			l.s.log.Warn("conversation lease not renewed; retrying", slog.String("conversation_id", l.id), slog.Any("error", err))
		}
	}
}

// Release stops renewing and deletes the lease (if it is still this
// holder's), so that another process may claim the conversation at once.
func (l *convLease) Release(ctx context.Context) error {
	var err error
	l.stopOnce.Do(func() {
		close(l.stop)
		<-l.done
		l.s.letGo(l.id)
		select {
		case <-l.lost:
			return
		default:
		}
		err = l.s.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			err = nil // someone else holds it now
		}
		if err != nil {
			err = fmt.Errorf("natsjs: release conversation %s: %w", l.id, err)
		}
	})
	return err
}
