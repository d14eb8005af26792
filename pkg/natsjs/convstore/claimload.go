package convstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/offload-dev/offload/pkg/conversation"
)

// ClaimLoad claims conversation id without waiting, as [Store.TryClaim]
// does, and loads it, from what a read of its lease saw (seen, from
// [Store.ReadLease]): `agent serve`'s wake, which read the lease before
// it decided to claim. When seen is a release, the claim takes the lease
// at the revision seen, and the state and the pending record are read
// meanwhile, not after it: no holder was left to write the conversation
// since the release, which came after its holder's last save, so what
// they read is what the claim holds (if another process claimed since,
// the claim fails and what was read is dropped). A lease seen lapsed is
// claimed first, then loaded (its holder may still write). A lease seen
// held, or taken since, is a *conversation.ClaimedError; a claim whose
// load fails is released, and the load's error returned
// (conversation.ErrNotFound for an unknown conversation).
func (s *Store) ClaimLoad(ctx context.Context, id, holder string, seen LeaseSeen) (conversation.Lease, *conversation.State, conversation.Revision, error) {
	if err := checkConvID(id); err != nil {
		return nil, nil, 0, err
	}
	if seen.Held {
		return nil, nil, 0, &conversation.ClaimedError{ID: id, Holder: seen.Holder, Until: seen.Until}
	}
	if !seen.Released {
		l, err := s.TryClaim(ctx, id, holder)
		if err != nil {
			return nil, nil, 0, err
		}
		st, rev, err := s.Load(ctx, id)
		if err != nil {
			s.releaseFailed(ctx, id, l)
			return nil, nil, 0, err
		}
		return l, st, rev, nil
	}
	var (
		read              sync.WaitGroup
		st                *conversation.State
		rev               conversation.Revision
		object            string
		loadErr           error
		recSeq            uint64
		recLive, recKnown bool
	)
	read.Go(func() { st, rev, object, loadErr = s.load(ctx, id) })
	read.Go(func() { recSeq, recLive, recKnown = s.lookRecord(ctx, id) })
	lrev, err := s.takeLease(ctx, leaseKeyPre+id, holder, s.cfg.LeaseTTL, seen.Seq)
	read.Wait()
	var held *errHeld
	if errors.As(err, &held) {
		return nil, nil, 0, &conversation.ClaimedError{ID: id, Holder: held.holder, Until: held.until}
	}
	if err != nil {
		return nil, nil, 0, fmt.Errorf("natsjs: claim conversation %s: %w", id, err)
	}
	l := s.leased(id, holder, lrev, s.cfg.LeaseTTL)
	if loadErr != nil {
		s.releaseFailed(ctx, id, l)
		return nil, nil, 0, loadErr
	}
	s.remember(id, object)
	if recKnown {
		s.knowRecord(id, recSeq, recLive)
	}
	return l, st, rev, nil
}

// releaseFailed releases the lease of a claim whose load failed.
func (s *Store) releaseFailed(ctx context.Context, id string, l conversation.Lease) {
	if err := l.Release(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("lease not released; it lapses by itself", slog.String("conversation_id", id), slog.Any("error", err))
	}
}
