package serve

import (
	"context"
	"sync"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
)

// ended reports whether conversation id's last run ended by itself
// (finished, or failed) by its status index entry; false when it has
// none.
func (s *Service) ended(ctx context.Context, id string) (bool, error) {
	st, err := s.cfg.Store.GetStatus(ctx, id)
	if err != nil || st == nil {
		return false, err
	}
	return st.Status == conversation.StatusFinished || st.Status == conversation.StatusFailed, nil
}

// prechecked is what a wake's pre-check decided.
type prechecked struct {
	// decided says out is what the wake did; else the claim decides.
	decided bool
	out     WakeOutcome
	// agent is the agent the pending record names ("": the caller loads
	// the state to learn it).
	agent string
	// lease is what the read of the lease saw, which the claim starts
	// from (nil: not read).
	lease *convstore.LeaseSeen
}

// precheck decides a wake from the conversation's lease, its pending
// record and a direct get per pending task: no consumer, no history, no
// claim. It leaves the decision to the claim when the record names an
// agent this replica serves, and what the conversation waits for is
// complete (agent is that agent), or when the record cannot tell (none
// while the status index does not say the last run ended by itself, or
// one written before records named their agent: agent is empty, the
// caller loads the state). A lease held elsewhere is WakeHeld: the live run's next save
// is not in the record yet.
func (s *Service) precheck(ctx context.Context, id string) (prechecked, error) {
	sr, ar := s.cfg.Store, s.cfg.Inbox
	// The lease and the record at once: two reads, one round trip's wait.
	var (
		lease    convstore.LeaseSeen
		leaseErr error
		read     sync.WaitGroup
	)
	read.Go(func() { lease, leaseErr = sr.ReadLease(ctx, id) })
	sum, err := sr.Summary(ctx, id)
	read.Wait()
	if leaseErr != nil || lease.Held {
		return prechecked{decided: true, out: WakeHeld}, leaseErr
	}
	if err != nil {
		return prechecked{decided: true}, err
	}
	if sum == nil {
		// Nothing pending since the last save. A conversation whose run
		// ended by itself waits for nothing: a message for it (a late
		// result of a call its run consumed live, a duplicate) is
		// consumed with no claim. Any other status loads the state (a
		// pause whose record was not written).
		if ended, err := s.ended(ctx, id); err != nil || ended {
			return prechecked{decided: true, out: WakeConsumed}, err
		}
	}
	if sum == nil || sum.Agent == "" {
		return prechecked{lease: &lease}, nil
	}
	if _, ok := s.agents[sum.Agent]; !ok {
		return prechecked{decided: true, out: s.missingAgent(id, sum.Agent)}, nil
	}
	arrived, err := ar.Arrived(ctx, sum)
	if err != nil {
		return prechecked{decided: true}, err
	}
	if !complete(sum, arrived) {
		return prechecked{decided: true, out: WakeConsumed}, nil
	}
	return prechecked{agent: sum.Agent, lease: &lease}, nil
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
