package conversation

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Revision identifies a saved version of a conversation's state; 0 means
// "not saved yet".
type Revision uint64

// LeaseTTL is how long a lease outlives its holder's last renewal: a
// conversation whose process died is free again within LeaseTTL.
const LeaseTTL = 15 * time.Second

var (
	// ErrNotFound is returned for a conversation the store does not have.
	ErrNotFound = errors.New("conversation: not found")
	// ErrConflict is returned by Save when the state changed since the
	// revision the caller read (another process saved it).
	ErrConflict = errors.New("conversation: changed by another process")
	// ErrClaimed is wrapped by the *ClaimedError of a claim that gave up.
	ErrClaimed = errors.New("conversation: claimed by another process")
	// ErrLeaseLost is returned when a lease could not be renewed in time:
	// another process may now work on the conversation.
	ErrLeaseLost = errors.New("conversation: lease lost")
)

// ClaimedError says who holds a conversation that could not be claimed.
type ClaimedError struct {
	// ID is the conversation.
	ID string
	// Holder names the process holding it.
	Holder string
	// Until is when its lease lapses unless renewed.
	Until time.Time
}

// Error implements error.
func (e *ClaimedError) Error() string {
	return fmt.Sprintf("conversation %s is claimed by %s (lease until %s); another process is working on it",
		e.ID, e.Holder, e.Until.UTC().Format(time.RFC3339))
}

// Unwrap returns ErrClaimed.
func (e *ClaimedError) Unwrap() error { return ErrClaimed }

// Store keeps conversations. Implementations are safe for concurrent use.
type Store interface {
	// Load returns the conversation's state and its revision, or
	// ErrNotFound.
	Load(ctx context.Context, id string) (*State, Revision, error)
	// Save stores st if the conversation is still at revision prev (0:
	// it must not exist yet) and returns the new revision, or
	// ErrConflict.
	Save(ctx context.Context, st *State, prev Revision) (Revision, error)
	// List returns the IDs of the stored conversations, sorted.
	List(ctx context.Context) ([]string, error)
	// Claim takes the conversation's lease for holder, waiting up to
	// LeaseTTL for another holder's lease to be released or to lapse, and
	// then fails with a *ClaimedError. The lease is renewed until
	// released.
	Claim(ctx context.Context, id, holder string) (Lease, error)
}

// Lease is a claim on a conversation, renewed in the background until it
// is released.
type Lease interface {
	// Lost is closed when the lease could not be renewed in time (the
	// holder must stop working on the conversation).
	Lost() <-chan struct{}
	// Release gives the conversation up and stops renewing.
	Release(ctx context.Context) error
}
