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
// taken at its revision too, then the conversation loaded (its holder may
// have written until then). A lease seen
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
	var (
		read              sync.WaitGroup
		st                *conversation.State
		rev               conversation.Revision
		object            string
		loadErr           error
		recSeq            uint64
		recLive, recKnown bool
	)
	if seen.Released {
		read.Go(func() { st, rev, object, loadErr = s.load(ctx, id) })
		read.Go(func() { recSeq, recLive, recKnown = s.lookRecord(ctx, id) })
	}
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
	switch {
	case !seen.Released:
		// Read once the claim holds (a lapsed lease's holder may have
		// written until then): Load, held, reads the record too.
		st, rev, loadErr = s.Load(ctx, id)
	case loadErr == nil:
		s.remember(id, object)
		if recKnown {
			s.knowRecord(id, recSeq, recLive)
		}
	}
	if loadErr != nil {
		if err := l.Release(context.WithoutCancel(ctx)); err != nil {
			s.log.Warn("lease not released; it lapses by itself", slog.String("conversation_id", id), slog.Any("error", err))
		}
		return nil, nil, 0, loadErr
	}
	return l, st, rev, nil
}
