package serve

import (
	"context"
	"sync"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
)

// summaryReader is a store that tells, without loading a conversation,
// whether a process holds it and what it waits for (convstore.Store).
type summaryReader interface {
	Held(ctx context.Context, id string) (bool, error)
	Summary(ctx context.Context, id string) (*conversation.Summary, error)
}

// statusReader is a store that keeps the status index (convstore.Store).
type statusReader interface {
	GetStatus(ctx context.Context, id string) (*convstore.Status, error)
}

// ended reports whether conversation id's last run ended by itself
// (finished, or failed) by its status index entry; false when the store
// keeps no index or has no entry for it.
func (s *Service) ended(ctx context.Context, id string) (bool, error) {
	sr, ok := s.cfg.Session.Store.(statusReader)
	if !ok {
		return false, nil
	}
	st, err := sr.GetStatus(ctx, id)
	if err != nil || st == nil {
		return false, err
	}
	return st.Status == StatusFinished || st.Status == StatusFailed, nil
}

// arrivalReader is an inbox that tells which pending tasks have a
// message stored for them, by direct gets (convstore.Inbox).
type arrivalReader interface {
	Arrived(ctx context.Context, sum *conversation.Summary) (map[string]bool, error)
}

// precheck decides a wake from the conversation's lease, its pending
// record and a direct get per pending task: no consumer, no history, no
// claim. decided is false when the claim must decide (the record names
// an agent this replica serves, and what the conversation waits for is
// complete: name is that agent), or when the record cannot tell (none
// while the status index does not say the last run ended by itself, or
// one written before records named their agent, or a store or inbox
// that cannot be read this way: name is empty, the caller loads the
// state). A lease held elsewhere is WakeHeld: the live run's next save
// is not in the record yet.
func (s *Service) precheck(ctx context.Context, id string) (out WakeOutcome, name string, decided bool, err error) {
	sr, ok := s.cfg.Session.Store.(summaryReader)
	ar, ok2 := s.cfg.Session.Inbox.(arrivalReader)
	if !ok || !ok2 {
		return 0, "", false, nil
	}
	// The lease and the record at once: two reads, one round trip's wait.
	var held bool
	var heldErr error
	var read sync.WaitGroup
	read.Go(func() { held, heldErr = sr.Held(ctx, id) })
	sum, err := sr.Summary(ctx, id)
	read.Wait()
	if heldErr != nil || held {
		return WakeHeld, "", true, heldErr
	}
	if err == nil && sum == nil {
		// Nothing pending since the last save. A conversation whose run
		// ended by itself waits for nothing: a message for it (a late
		// result of a call its run consumed live, a duplicate) is
		// consumed with no claim. Any other status loads the state (a
		// pause whose record was not written).
		if ended, err := s.ended(ctx, id); err != nil || ended {
			return WakeConsumed, "", true, err
		}
	}
	if err != nil || sum == nil || sum.Agent == "" {
		return 0, "", err != nil, err
	}
	if _, ok := s.agents[sum.Agent]; !ok {
		return s.missingAgent(id, sum.Agent), "", true, nil
	}
	arrived, err := ar.Arrived(ctx, sum)
	if err != nil {
		return 0, "", true, err
	}
	if !complete(sum, arrived) {
		return WakeConsumed, "", true, nil
	}
	return 0, sum.Agent, false, nil
}

// complete reports whether what the conversation of sum waits for is
// complete, arrived being the tasks with a message stored for them: no
// blocking call without its message, and at least one message arrived.
// It is the wake's one predicate (the session's Continue decides the
// same after the claim, from what it reads).
func complete(sum *conversation.Summary, arrived map[string]bool) bool {
	some := false
	for _, t := range sum.Tasks {
		switch {
		case arrived[t.TaskID]:
			some = true
		case blocks(t):
			return false
		}
	}
	return some
}

// blocks reports whether the continuation needs task t answered first:
// approvals and external calls do, unless non-blocking (SPEC §12);
// background tasks run on, and any of their outcomes, or of a
// non-blocking call's, continues the conversation.
func blocks(t deferred.PendingTask) bool { return !t.Background() && !t.NonBlocking }
