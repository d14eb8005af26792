package serve

import (
	"context"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/session"
)

// Store is what the core needs of the conversation store, beyond
// conversation.Store: the lease read and taken without waiting, the
// pending record read without a load, the status index and the cancel
// markers. convstore.Store implements it; the conformance test
// (store_test.go) holds it to the behaviour the core relies on.
type Store interface {
	conversation.Store
	// RecordStatus and RecordFailure keep the status index (a run's
	// session records its running and outcome there).
	session.StatusRecorder
	session.FailureRecorder
	// SetStatus keeps a whole entry of the status index (who started
	// the conversation too, SPEC §21).
	session.StatusSetter

	// TryClaim claims conversation id without waiting: a lease held by
	// another is a *conversation.ClaimedError at once.
	TryClaim(ctx context.Context, id, holder string) (conversation.Lease, error)
	// ClaimLoad claims conversation id from seen, the lease as read
	// before (ReadLease), and loads it meanwhile when the lease was free:
	// one that was taken since is a *conversation.ClaimedError.
	ClaimLoad(ctx context.Context, id, holder string, seen convstore.LeaseSeen) (conversation.Lease, *conversation.State, conversation.Revision, error)
	// ReadLease reads conversation id's lease: who holds it and at which
	// revision (Held false for a free or lapsed one).
	ReadLease(ctx context.Context, id string) (convstore.LeaseSeen, error)
	// LeaseExpiry returns when conversation id's lease lapses (zero when
	// nobody holds it).
	LeaseExpiry(ctx context.Context, id string) (time.Time, error)
	// Held reports whether a process holds conversation id's lease.
	Held(ctx context.Context, id string) (bool, error)

	// Summary returns conversation id's pending record as its last save
	// wrote it: nil when it waits for nothing.
	Summary(ctx context.Context, id string) (*conversation.Summary, error)

	// GetStatus returns conversation id's entry in the status index (nil
	// when it has none).
	GetStatus(ctx context.Context, id string) (*conversation.Status, error)
	// Statuses calls fn with every entry of the status index.
	Statuses(ctx context.Context, fn func(conversation.Status) error) error
	// StatusPage returns up to limit entries of the status index of
	// status ("": all), the latest changed first, changed before sequence
	// before of its index (0: the newest), and the sequence the next page
	// reads before (0: none); StatusCounts how many it holds of each
	// status (SPEC §21).
	StatusPage(ctx context.Context, status string, before uint64, limit int) ([]conversation.Status, uint64, error)
	StatusCounts(ctx context.Context) (map[string]int, error)
	// WatchStatuses calls fn with every entry of the status index, then
	// with each one written, until stop.
	WatchStatuses(ctx context.Context, fn func(st conversation.Status, rev uint64)) (stop func(), err error)

	// RequestCancel stores conversation id's cancel marker, which the
	// replica holding it reads (WatchCancels).
	RequestCancel(ctx context.Context, id string) error
	// WatchCancels calls fn with the conversation of each cancel marker
	// stored from now on, until stop.
	WatchCancels(ctx context.Context, fn func(id string)) (stop func(), err error)
}

// Inbox is what the core reads of what arrived for the conversations
// (the decisions, answers and results streams; convstore.Inbox): the
// session's collector, and which pending tasks have a message stored,
// by direct gets, without a consumer.
type Inbox interface {
	session.Collector
	// Arrived returns the tasks of sum with a message stored for them.
	Arrived(ctx context.Context, sum *conversation.Summary) (map[string]bool, error)
	// ArrivedAfter returns the tasks of sum with a message stored past
	// checkpoint cp.
	ArrivedAfter(ctx context.Context, sum *conversation.Summary, cp conversation.Checkpoint) (map[string]bool, error)
}

// The JetStream store and inbox are the core's.
var (
	_ Store = (*convstore.Store)(nil)
	_ Inbox = (*convstore.Inbox)(nil)
)

// quickClaim is the store of a wake or a continuation: its Claim does not
// wait for another holder (a *conversation.ClaimedError at once rather
// than after the lease's TTL).
type quickClaim struct{ Store }

// Claim implements conversation.Store.
func (q quickClaim) Claim(ctx context.Context, id, holder string) (conversation.Lease, error) {
	return q.TryClaim(ctx, id, holder)
}

// leaseClaim is the store of a wake that read the conversation's lease in
// its pre-check: its claim starts from what it saw, the state read
// meanwhile (a session.ClaimLoader).
type leaseClaim struct {
	quickClaim
	seen convstore.LeaseSeen
}

// ClaimLoad implements session.ClaimLoader.
func (c leaseClaim) ClaimLoad(ctx context.Context, id, holder string) (conversation.Lease, *conversation.State, conversation.Revision, error) {
	return c.Store.ClaimLoad(ctx, id, holder, c.seen)
}
