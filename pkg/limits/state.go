package limits

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Reasons a call waits: the label limit of offload_tool_limited_total and
// the reason of a queued call.
const (
	ReasonMaxInFlight = "max_in_flight"
	ReasonRate        = "rate"
	ReasonCoolDown    = "cool_down"
	ReasonPaused      = "paused"
	// ReasonOrder: the call could start, but calls that waited before it
	// (or of a higher priority, or of a key owed its share) go first.
	ReasonOrder = "order"
)

// MaxQueue bounds the calls that wait for one tool; [State.Park] refuses
// more ([ErrQueueFull]), and the call then waits where it was.
const MaxQueue = 1000

// ErrQueueFull is returned by [State.Park] when MaxQueue calls wait.
var ErrQueueFull = errors.New("limits: the tool's queue is full")

// State is a tool's fleet control state, shared by every worker replica
// of the tool and changed only by compare-and-set of its whole value
// (natsjs keeps it as the key <tool>.state of the bucket <prefix>_limits):
// the calls that wait (Queue, in arrival order), the buckets' slots held,
// rates and cool-downs, the fairness passes and the operator's pause.
// Every method takes the time it decides at; none does I/O.
type State struct {
	// Queue are the calls that wait, in arrival order; a claimed entry
	// runs on its claimer and is removed once its run is settled.
	Queue []Entry `json:"queue,omitempty"`
	// Buckets are the limits' state by bucket ("" is the tool's).
	Buckets map[string]*Bucket `json:"buckets,omitempty"`
	// VT is the fairness' virtual time: the pass of the key last served.
	VT float64 `json:"vt,omitempty"`
	// Pass is, by fairness bucket, the pass of each key served lately.
	Pass map[string]float64 `json:"pass,omitempty"`
	// Pause, when set, is the operator's pause of the tool's dispatch.
	Pause *Pause `json:"pause,omitempty"`
}

// Bucket is the state of one bucket: its calls running, its rate and its
// cool-down.
type Bucket struct {
	// Holders are the calls running, by ID ("<task>:<attempt>"), each for
	// as long as its lease (renewed while it runs; a worker killed holding
	// one lets it expire).
	Holders map[string]Lease `json:"holders,omitempty"`
	// TAT is the rate's theoretical arrival time (GCRA).
	TAT time.Time `json:"tat,omitzero"`
	// Cool, when in the future, is the end of a cool-down: no call of the
	// bucket starts before it (an upstream's retry_after).
	Cool time.Time `json:"cool,omitzero"`
}

// Lease is held by a worker until a time, renewed while it holds it.
type Lease struct {
	Worker string    `json:"worker"`
	Until  time.Time `json:"until"`
}

// Pause is an operator's pause of a tool's dispatch.
type Pause struct {
	// Until is when it ends by itself; zero: when resumed.
	Until time.Time `json:"until,omitzero"`
	// By names who paused, At when.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// Active reports whether the pause holds at now.
func (p *Pause) Active(now time.Time) bool {
	return p != nil && (p.Until.IsZero() || now.Before(p.Until))
}

// Entry is a call that waits in its tool's queue.
type Entry struct {
	// ID names the call's attempt, "<task>:<attempt>": its holders' name.
	ID string `json:"id"`
	// Task and Attempt are the task's; Conversation, Agent and Tenant
	// who made the call.
	Task         string `json:"task"`
	Attempt      int    `json:"attempt,omitempty"`
	Conversation string `json:"conversation"`
	Agent        string `json:"agent,omitempty"`
	Tenant       string `json:"tenant,omitempty"`
	// Plan is what holds the call.
	Plan Plan `json:"plan"`
	// Since is when it was first held.
	Since time.Time `json:"since"`
	// NotBefore, when set, is the earliest it may start (a retry after a
	// cool-down, a hand-back's delay).
	NotBefore time.Time `json:"not_before,omitzero"`
	// Deliveries counts the call's deliveries so far, before it waited and
	// since: its delivery limit counts them.
	Deliveries int `json:"deliveries"`
	// Claim, while live, says which worker runs the call.
	Claim *Lease `json:"claim,omitempty"`
	// Reason is why it waited when last looked at.
	Reason string `json:"reason,omitempty"`
	// Cancelled says an operator cancelled the call while it waited
	// ([State.Cancel]): it starts at once, whatever holds the others, to
	// be answered cancelled without running; it takes no slot.
	Cancelled bool `json:"cancelled,omitempty"`
}

// waiting reports whether the entry waits at now (not claimed, or its
// claimer's lease expired).
func (e *Entry) waiting(now time.Time) bool { return e.Claim == nil || !now.Before(e.Claim.Until) }

// ID returns the holders' name of a task's attempt, "<task>:<attempt>".
func ID(task string, attempt int) string {
	return task + ":" + strconv.Itoa(attempt)
}

func (s *State) bucket(name string) *Bucket {
	if s.Buckets == nil {
		s.Buckets = map[string]*Bucket{}
	}
	b := s.Buckets[name]
	if b == nil {
		b = &Bucket{}
		s.Buckets[name] = b
	}
	return b
}

// live returns how many holders of b hold at now, and when the first of
// them lapses.
func (b *Bucket) live(now time.Time) (n int, first time.Time) {
	if b == nil {
		return 0, time.Time{}
	}
	for _, l := range b.Holders {
		if now.Before(l.Until) {
			n++
			if first.IsZero() || l.Until.Before(first) {
				first = l.Until
			}
		}
	}
	return n, first
}

// Blocked returns why a call of plan p may not start at now ("" when it
// may), and when it next may (zero: when a running call ends, which is
// not known).
func (s *State) Blocked(p Plan, now time.Time) (reason string, at time.Time) {
	reason, _, at = s.BlockedBy(p, now)
	return reason, at
}

// BlockedBy is [State.Blocked] that also names the bucket of the first
// limit that holds the call ("" the tool's).
func (s *State) BlockedBy(p Plan, now time.Time) (reason, bucket string, at time.Time) {
	block := func(r, b string, t time.Time) {
		if reason == "" {
			reason, bucket = r, b
		}
		if t.After(at) {
			at = t
		}
	}
	if s.Pause.Active(now) {
		block(ReasonPaused, "", s.Pause.Until)
	}
	if b := s.Buckets[""]; b != nil && now.Before(b.Cool) {
		block(ReasonCoolDown, "", b.Cool)
	}
	for _, h := range p.Holds {
		b := s.Buckets[h.Bucket]
		if b == nil {
			continue
		}
		if now.Before(b.Cool) {
			block(ReasonCoolDown, h.Bucket, b.Cool)
		}
		if h.Max > 0 {
			if n, first := b.live(now); n >= h.Max {
				block(ReasonMaxInFlight, h.Bucket, first)
			}
		}
		if h.Every > 0 {
			if next := b.TAT.Add(-h.tolerance()); now.Before(next) {
				block(ReasonRate, h.Bucket, next)
			}
		}
	}
	return reason, bucket, at
}

// tolerance is the GCRA's burst tolerance, (burst-1)×interval.
func (h Hold) tolerance() time.Duration {
	if h.Burst <= 1 {
		return 0
	}
	return time.Duration(h.Burst-1) * h.Every
}

// acquire records the call id of plan p as started at now: a holder of
// each bucket until now+lease, each rate charged.
func (s *State) acquire(p Plan, id, worker string, now time.Time, lease time.Duration) {
	for _, h := range p.Holds {
		b := s.bucket(h.Bucket)
		if h.Max > 0 {
			if b.Holders == nil {
				b.Holders = map[string]Lease{}
			}
			b.Holders[id] = Lease{Worker: worker, Until: now.Add(lease)}
		}
		if h.Every > 0 {
			tat := b.TAT
			if tat.Before(now) {
				tat = now
			}
			b.TAT = tat.Add(h.Every)
		}
	}
}

// Admit decides for a call of plan p that was not waiting (its first
// delivery): it starts now, its holders recorded and its rates charged,
// unless it is blocked, or a call that waits may start and goes first (of
// the same or a higher priority: the new call waits its turn). It returns
// the reason it must wait when it may not start.
func (s *State) Admit(p Plan, id, worker string, now time.Time, lease time.Duration) (reason string) {
	if r := s.MustWait(p, id, now); r != "" {
		return r
	}
	s.acquire(p, id, worker, now, lease)
	return ""
}

// MustWait returns why a call id of plan p that was not waiting may not
// start at now, as [State.Admit] decides it, changing nothing: "" when it
// may.
func (s *State) MustWait(p Plan, id string, now time.Time) (reason string) {
	if r, _ := s.Blocked(p, now); r != "" {
		return r
	}
	for i := range s.Queue {
		e := &s.Queue[i]
		if e.ID != id && e.waiting(now) && e.Plan.Priority <= p.Priority && !now.Before(e.NotBefore) {
			if r, _ := s.Blocked(e.Plan, now); r == "" {
				return ReasonOrder
			}
		}
	}
	return ""
}

// Park appends e to the queue; false when an entry of its ID waits
// already (e is a repeated delivery of it), [ErrQueueFull] when the
// queue is full.
func (s *State) Park(e Entry) (bool, error) {
	if s.find(e.ID) >= 0 {
		return false, nil
	}
	if len(s.Queue) >= MaxQueue {
		return false, ErrQueueFull
	}
	s.Queue = append(s.Queue, e)
	return true, nil
}

func (s *State) find(id string) int {
	return slices.IndexFunc(s.Queue, func(e Entry) bool { return e.ID == id })
}

// Get returns the entry of id, if it waits or runs from the queue.
func (s *State) Get(id string) (Entry, bool) {
	if i := s.find(id); i >= 0 {
		return s.Queue[i], true
	}
	return Entry{}, false
}

// eff is the effective pass of fairness bucket k: no key is owed more
// than the share it would have had since the last served.
func (s *State) eff(k string) float64 {
	return max(s.Pass[k], s.VT)
}

// before reports whether a goes before b: priority, then the fairness
// pass of its key (passes as given), then arrival.
func before(a, b *Entry, pass func(string) float64) bool {
	if a.Plan.Priority != b.Plan.Priority {
		return a.Plan.Priority < b.Plan.Priority
	}
	if pa, pb := pass(a.Plan.Fair), pass(b.Plan.Fair); pa != pb {
		return pa < pb
	}
	return a.Since.Before(b.Since)
}

// Next returns the index of the waiting call to start at now: among those
// that may start, the one of the highest priority, then of the key with
// the smallest fairness pass, then the first arrived; -1 when none may.
// wake is when one may next (zero: when a running call ends).
func (s *State) Next(now time.Time) (i int, wake time.Time) {
	i = -1
	for j := range s.Queue {
		e := &s.Queue[j]
		if !e.waiting(now) {
			if wake.IsZero() || e.Claim.Until.Before(wake) {
				wake = e.Claim.Until // its claimer may have died
			}
			continue
		}
		if e.Cancelled {
			if i < 0 || !s.Queue[i].Cancelled || e.Since.Before(s.Queue[i].Since) {
				i = j // answered before any other: it does not run
			}
			continue
		}
		if i >= 0 && s.Queue[i].Cancelled {
			continue
		}
		at := e.NotBefore
		r, bat := s.Blocked(e.Plan, now)
		if bat.After(at) {
			at = bat
		}
		if r != "" || now.Before(e.NotBefore) {
			if r == "" {
				r = ReasonCoolDown
			}
			e.Reason = r
			if !at.IsZero() && (wake.IsZero() || at.Before(wake)) {
				wake = at
			}
			continue
		}
		if i < 0 || before(e, &s.Queue[i], s.eff) {
			i = j
		}
	}
	if i >= 0 {
		wake = now
	}
	return i, wake
}

// Claim records the waiting call at index i as started at now on worker:
// claimed until now+lease (renewed while it runs), its holders recorded,
// its rates charged, its delivery counted and its key's fairness pass
// advanced by 1/weight.
func (s *State) Claim(i int, worker string, now time.Time, lease time.Duration) Entry {
	e := &s.Queue[i]
	e.Claim = &Lease{Worker: worker, Until: now.Add(lease)}
	e.Deliveries++
	if e.Cancelled {
		return *e // it does not run: no slot, no rate, no share
	}
	s.acquire(e.Plan, e.ID, worker, now, lease)
	k := e.Plan.Fair
	p := s.eff(k)
	s.VT = p
	w := e.Plan.Weight
	if w <= 0 {
		w = 1
	}
	if s.Pass == nil {
		s.Pass = map[string]float64{}
	}
	s.Pass[k] = p + 1/w
	return *e
}

// Remove removes the call id from the queue and its holders from every
// bucket; it reports whether it was queued.
func (s *State) Remove(id string) bool {
	s.Release(id)
	i := s.find(id)
	if i < 0 {
		return false
	}
	s.Queue = slices.Delete(s.Queue, i, i+1)
	return true
}

// Unclaim puts the claimed call id back to wait, not before notBefore
// (zero: at once), its holders released; false when it is not queued.
func (s *State) Unclaim(id string, notBefore time.Time) bool {
	s.Release(id)
	i := s.find(id)
	if i < 0 {
		return false
	}
	s.Queue[i].Claim = nil
	s.Queue[i].NotBefore = notBefore
	return true
}

// Cancel marks the waiting calls match selects as cancelled (see
// [Entry.Cancelled]) and returns them; a call claimed already (running)
// is left to its run, which the cancel message reaches.
func (s *State) Cancel(now time.Time, match func(*Entry) bool) []Entry {
	var out []Entry
	for i := range s.Queue {
		if e := &s.Queue[i]; !e.Cancelled && e.waiting(now) && match(e) {
			e.Cancelled = true
			out = append(out, *e)
		}
	}
	return out
}

// Release removes the call id's holders from every bucket: it ended.
func (s *State) Release(id string) {
	for _, b := range s.Buckets {
		delete(b.Holders, id)
	}
}

// Renew extends, until until, the leases worker holds for the calls of
// ids (holders and claims); it returns how many it extended.
func (s *State) Renew(worker string, ids map[string]bool, until time.Time) int {
	n := 0
	for _, b := range s.Buckets {
		for id, l := range b.Holders {
			if ids[id] && l.Worker == worker {
				b.Holders[id] = Lease{Worker: worker, Until: until}
				n++
			}
		}
	}
	for i := range s.Queue {
		if c := s.Queue[i].Claim; c != nil && c.Worker == worker && ids[s.Queue[i].ID] {
			c.Until = until
			n++
		}
	}
	return n
}

// CoolDown holds the calls of bucket b ("" the tool's) until until, unless
// a later cool-down holds them already.
func (s *State) CoolDown(b string, until time.Time) {
	bk := s.bucket(b)
	if until.After(bk.Cool) {
		bk.Cool = until
	}
}

// CoolUntil returns the end of the latest cool-down in force at now, and
// its bucket (zero: none).
func (s *State) CoolUntil(now time.Time) (until time.Time, bucket string) {
	for name, b := range s.Buckets {
		if now.Before(b.Cool) && b.Cool.After(until) {
			until, bucket = b.Cool, name
		}
	}
	return until, bucket
}

// Ahead returns how many waiting calls start before the call id, by the
// order of [State.Next] (claims and limits as they are at now left aside):
// what a queued call is told.
func (s *State) Ahead(id string, now time.Time) int {
	var rest []*Entry
	for i := range s.Queue {
		if e := &s.Queue[i]; e.waiting(now) {
			rest = append(rest, e)
		}
	}
	pass := make(map[string]float64, len(s.Pass))
	for k, v := range s.Pass {
		pass[k] = v
	}
	vt := s.VT
	eff := func(k string) float64 { return max(pass[k], vt) }
	for n := 0; len(rest) > 0 && n < MaxQueue; n++ {
		best := 0
		for j := 1; j < len(rest); j++ {
			if before(rest[j], rest[best], eff) {
				best = j
			}
		}
		e := rest[best]
		if e.ID == id {
			return n
		}
		p := eff(e.Plan.Fair)
		vt = p
		w := e.Plan.Weight
		if w <= 0 {
			w = 1
		}
		pass[e.Plan.Fair] = p + 1/w
		rest = slices.Delete(rest, best, best+1)
	}
	return len(rest)
}

// Waiting returns how many calls wait at now (not running from the
// queue).
func (s *State) Waiting(now time.Time) int {
	n := 0
	for i := range s.Queue {
		if s.Queue[i].waiting(now) {
			n++
		}
	}
	return n
}

// Held returns the calls that wait at now (as [State.Waiting] counts
// them), those an operator cancelled left out, in the queue's order.
func (s *State) Held(now time.Time) []Entry {
	var out []Entry
	for i := range s.Queue {
		if e := s.Queue[i]; e.waiting(now) && !e.Cancelled {
			out = append(out, e)
		}
	}
	return out
}

// Running returns how many distinct calls hold a slot at now.
func (s *State) Running(now time.Time) int {
	seen := map[string]bool{}
	for _, b := range s.Buckets {
		for id, l := range b.Holders {
			if now.Before(l.Until) {
				seen[id] = true
			}
		}
	}
	return len(seen)
}

// Prune forgets what no longer holds at now: lapsed holders, buckets with
// nothing in force, an ended pause, the passes of keys with no call
// waiting that the virtual time has caught up with.
func (s *State) Prune(now time.Time) {
	for name, b := range s.Buckets {
		for id, l := range b.Holders {
			if !now.Before(l.Until) {
				delete(b.Holders, id)
			}
		}
		if len(b.Holders) == 0 && !b.TAT.After(now) && !b.Cool.After(now) {
			delete(s.Buckets, name)
		}
	}
	if s.Pause != nil && !s.Pause.Active(now) {
		s.Pause = nil
	}
	queued := map[string]bool{}
	for i := range s.Queue {
		queued[s.Queue[i].Plan.Fair] = true
	}
	for k, p := range s.Pass {
		if !queued[k] && p <= s.VT {
			delete(s.Pass, k)
		}
	}
	if len(s.Queue) == 0 && len(s.Pass) == 0 {
		s.VT = 0
	}
}

// Clone returns a copy of s that shares nothing a change of either
// alters: a change may be tried on it and dropped.
func (s *State) Clone() *State {
	c := &State{VT: s.VT, Pass: maps.Clone(s.Pass)}
	if s.Queue != nil {
		c.Queue = make([]Entry, len(s.Queue))
		for i, e := range s.Queue {
			e.Plan.Holds = slices.Clone(e.Plan.Holds)
			if e.Claim != nil {
				cl := *e.Claim
				e.Claim = &cl
			}
			c.Queue[i] = e
		}
	}
	if s.Buckets != nil {
		c.Buckets = make(map[string]*Bucket, len(s.Buckets))
		for name, b := range s.Buckets {
			cb := *b
			cb.Holders = maps.Clone(b.Holders)
			c.Buckets[name] = &cb
		}
	}
	if s.Pause != nil {
		p := *s.Pause
		c.Pause = &p
	}
	return c
}

// Empty reports whether the state holds nothing.
func (s *State) Empty() bool {
	return len(s.Queue) == 0 && len(s.Buckets) == 0 && len(s.Pass) == 0 && s.Pause == nil
}
