package taskmem

import "time"

// convActivity tracks, per conversation this dispatcher dispatched to, the
// calls pending and when it last finished (answered, cancelled, detached)
// a call, so that a result no call waits for can be told apart from
// another agent process's: a conversation is known while it has calls
// pending or finished one within keep. Its memory is one entry per
// conversation, whatever the number of calls, and expiring it needs no
// per-call memory (no count of remembered tasks): a conversation goes once
// no call of it is pending and its last finish is older than keep.
type convActivity struct {
	keep time.Duration
	m    map[string]convState
}

type convState struct {
	pending int
	last    time.Time // last finish; zero if none yet
}

func newConvActivity(keep time.Duration) *convActivity {
	return &convActivity{keep: keep, m: make(map[string]convState)}
}

// Hold counts one more pending call of conv.
func (a *convActivity) hold(conv string) {
	s := a.m[conv]
	s.pending++
	a.m[conv] = s
}

// Release counts one pending call of conv less, without a finish (a task
// whose dispatch failed).
func (a *convActivity) release(conv string) {
	s, ok := a.m[conv]
	if !ok {
		return
	}
	s.pending = max(s.pending-1, 0)
	if s.pending == 0 && s.last.IsZero() {
		delete(a.m, conv)
		return
	}
	a.m[conv] = s
}

// Finish records that a call of conv finished at now; pending says whether
// it was counted as pending (and is no more).
func (a *convActivity) finish(now time.Time, conv string, pending bool) {
	s := a.m[conv]
	if pending {
		s.pending = max(s.pending-1, 0)
	}
	if now.After(s.last) {
		s.last = now
	}
	a.m[conv] = s
}

// known reports whether conv has calls pending or finished one within keep
// of now.
func (a *convActivity) known(now time.Time, conv string) bool {
	s, ok := a.m[conv]
	return ok && a.live(now, s)
}

func (a *convActivity) live(now time.Time, s convState) bool {
	return s.pending > 0 || now.Sub(s.last) <= a.keep
}

// sweep forgets the conversations no longer known at now.
func (a *convActivity) sweep(now time.Time) {
	for conv, s := range a.m {
		if !a.live(now, s) {
			delete(a.m, conv)
		}
	}
}

// len returns how many conversations are tracked.
func (a *convActivity) len() int { return len(a.m) }
