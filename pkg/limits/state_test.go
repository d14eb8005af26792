package limits_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

const lease = 20 * time.Second

func plan(c limits.Call, ls ...*limits.Limits) limits.Plan { return limits.Combine(c, ls...) }

func entry(id string, p limits.Plan, since time.Time) limits.Entry {
	return limits.Entry{ID: id, Task: id, Plan: p, Since: since}
}

// The rate holds exactly: calls offered faster than it start at its pace,
// a burst at once; over a minute of 30/min, 30 start (the first at once).
func TestRateGCRA(t *testing.T) {
	t.Parallel()
	p := plan(limits.Call{}, &limits.Limits{Rate: &limits.Rate{Limit: 30, Period: limits.Duration(time.Minute)}})
	var s limits.State
	started := 0
	for now := t0; now.Before(t0.Add(time.Minute)); now = now.Add(100 * time.Millisecond) {
		if s.Admit(p, fmt.Sprint(started), "w", now, lease) == "" {
			started++
		}
	}
	if started != 30 {
		t.Errorf("%d calls started in a minute at 30/min, want 30", started)
	}
	burst := plan(limits.Call{}, &limits.Limits{Rate: &limits.Rate{Limit: 60, Period: limits.Duration(time.Minute), Burst: 3}})
	var b limits.State
	n := 0
	for b.Admit(burst, fmt.Sprint(n), "w", t0, lease) == "" {
		n++
	}
	if n != 3 {
		t.Errorf("%d calls started at once with burst 3", n)
	}
	if r, at := b.Blocked(burst, t0); r != limits.ReasonRate || !at.Equal(t0.Add(time.Second)) {
		t.Errorf("blocked %q until %v, want rate until t0+1s", r, at)
	}
}

// max_in_flight per key: each key's calls are bounded on their own; a
// released slot, or a lapsed lease (a worker killed holding it), frees it.
func TestMaxInFlightPerKey(t *testing.T) {
	t.Parallel()
	l := &limits.Limits{MaxInFlight: 2, Key: "tenant"}
	a, b := plan(limits.Call{Tenant: "a"}, l), plan(limits.Call{Tenant: "b"}, l)
	var s limits.State
	for i, want := range []string{"", "", limits.ReasonMaxInFlight} {
		if got := s.Admit(a, fmt.Sprint("a", i), "w", t0, lease); got != want {
			t.Errorf("call %d of a: %q, want %q", i, got, want)
		}
	}
	if got := s.Admit(b, "b0", "w", t0, lease); got != "" {
		t.Errorf("b is held by a's slots: %q", got)
	}
	s.Release("a0")
	if got := s.Admit(a, "a2", "w", t0, lease); got != "" {
		t.Errorf("after a release: %q", got)
	}
	if got := s.Admit(a, "a3", "w", t0.Add(lease-time.Millisecond), lease); got != limits.ReasonMaxInFlight {
		t.Errorf("before the leases lapse: %q", got)
	}
	// Renewed leases hold; the others lapse.
	s.Renew("w", map[string]bool{"a1": true}, t0.Add(2*lease))
	later := t0.Add(lease)
	if got := s.Admit(a, "a3", "w", later, lease); got != "" {
		t.Errorf("a lapsed lease still holds its slot: %q", got)
	}
	if got := s.Admit(a, "a4", "w", later, lease); got != limits.ReasonMaxInFlight {
		t.Errorf("a renewed lease lapsed: %q", got)
	}
	if got := s.Running(later); got != 2 { // a1 (renewed) and a3
		t.Errorf("running %d, want 2", got)
	}
}

// A waiting call of a higher priority starts before any of a lower one;
// within a priority, the first arrived.
func TestPriority(t *testing.T) {
	t.Parallel()
	lo := plan(limits.Call{}, &limits.Limits{MaxInFlight: 1}, &limits.Limits{Priority: 5})
	hi := plan(limits.Call{}, &limits.Limits{MaxInFlight: 1, Priority: 1})
	var s limits.State
	for i, e := range []limits.Entry{entry("lo1", lo, t0), entry("lo2", lo, t0.Add(1)), entry("hi", hi, t0.Add(2))} {
		if ok, err := s.Park(e); !ok || err != nil {
			t.Fatalf("park %d: %v %v", i, ok, err)
		}
	}
	if ok, _ := s.Park(entry("hi", hi, t0)); ok {
		t.Error("an entry parked twice")
	}
	if got := s.Ahead("lo2", t0); got != 2 {
		t.Errorf("lo2 has %d ahead, want 2 (hi, then lo1)", got)
	}
	var order []string
	for range 3 {
		i, _ := s.Next(t0)
		if i < 0 {
			t.Fatal("nothing may start")
		}
		e := s.Claim(i, "w", t0, lease)
		if j, wake := s.Next(t0); j >= 0 || !wake.Equal(t0.Add(lease)) {
			t.Errorf("a second call starts beside %s (max_in_flight 1): %d, wake %v", e.ID, j, wake)
		}
		order = append(order, e.ID)
		s.Remove(e.ID)
	}
	if fmt.Sprint(order) != "[hi lo1 lo2]" {
		t.Errorf("order %v", order)
	}
	// A new call waits its turn behind one that may start.
	if ok, _ := s.Park(entry("lo3", lo, t0)); !ok {
		t.Fatal("park")
	}
	if got := s.Admit(lo, "lo4", "w", t0, lease); got != limits.ReasonOrder {
		t.Errorf("a new call overtook one waiting: %q", got)
	}
	if got := s.Admit(hi, "hi2", "w", t0, lease); got != "" {
		t.Errorf("a new call of a higher priority waits behind a lower one: %q", got)
	}
}

// Weighted fairness: while two keys wait, they are served 2:1 by their
// weights; a key that floods does not delay a newcomer beyond its turn.
func TestFairness(t *testing.T) {
	t.Parallel()
	l := &limits.Limits{MaxInFlight: 1, Fairness: &limits.Fairness{Key: "tenant", Weights: map[string]float64{"a": 2}}}
	var s limits.State
	for i := range 60 {
		for _, tenant := range []string{"a", "b"} {
			e := entry(fmt.Sprint(tenant, i), plan(limits.Call{Tenant: tenant}, l), t0.Add(time.Duration(i)))
			if _, err := s.Park(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	served := map[string]int{}
	now := t0
	for range 30 {
		i, _ := s.Next(now)
		e := s.Claim(i, "w", now, lease)
		served[e.Plan.Fair]++
		s.Remove(e.ID)
	}
	if served["tenant=a"] != 20 || served["tenant=b"] != 10 {
		t.Errorf("served %v in 30 turns, want a 20 and b 10 (weights 2:1)", served)
	}
	// c arrives behind the backlog of a and b: it is next.
	if _, err := s.Park(entry("c0", plan(limits.Call{Tenant: "c"}, l), now.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if got := s.Ahead("c0", now); got != 0 {
		t.Errorf("a newcomer has %d ahead", got)
	}
	if i, _ := s.Next(now); s.Queue[i].ID != "c0" {
		t.Errorf("next is %s, want the newcomer c0", s.Queue[i].ID)
	}
	s.Prune(now)
	if len(s.Pass) > 3 {
		t.Errorf("passes kept: %v", s.Pass)
	}
}

// A claim whose worker stopped renewing lapses: the call waits again and
// is claimed anew, its deliveries counted.
func TestClaimLapses(t *testing.T) {
	t.Parallel()
	p := plan(limits.Call{}, &limits.Limits{MaxInFlight: 1})
	var s limits.State
	if _, err := s.Park(entry("x", p, t0)); err != nil {
		t.Fatal(err)
	}
	i, _ := s.Next(t0)
	s.Claim(i, "dead", t0, lease)
	if j, _ := s.Next(t0.Add(lease - 1)); j >= 0 {
		t.Error("claimed twice within the lease")
	}
	j, _ := s.Next(t0.Add(lease))
	if j < 0 {
		t.Fatal("a lapsed claim is not claimed again")
	}
	if e := s.Claim(j, "w2", t0.Add(lease), lease); e.Deliveries != 2 || e.Claim.Worker != "w2" {
		t.Errorf("claimed again: %+v", e)
	}
	s.Unclaim("x", t0.Add(time.Hour))
	if j, wake := s.Next(t0.Add(lease)); j >= 0 || !wake.Equal(t0.Add(time.Hour)) {
		t.Errorf("an unclaimed call started before its not-before: %d %v", j, wake)
	}
}

// A cool-down of a bucket and a pause hold every call of theirs.
func TestCoolDownAndPause(t *testing.T) {
	t.Parallel()
	l := &limits.Limits{Key: "tenant"}
	a, b := plan(limits.Call{Tenant: "a"}, l), plan(limits.Call{Tenant: "b"}, l)
	var s limits.State
	s.CoolDown("tenant=a", t0.Add(2*time.Second))
	if r, at := s.Blocked(a, t0); r != limits.ReasonCoolDown || !at.Equal(t0.Add(2*time.Second)) {
		t.Errorf("a: %q %v", r, at)
	}
	if r, _ := s.Blocked(b, t0); r != "" {
		t.Errorf("b is held by a's cool-down: %q", r)
	}
	if u, bk := s.CoolUntil(t0); bk != "tenant=a" || !u.Equal(t0.Add(2*time.Second)) {
		t.Errorf("cool until %v %q", u, bk)
	}
	s.CoolDown("", t0.Add(time.Second))
	if r, _ := s.Blocked(b, t0); r != limits.ReasonCoolDown {
		t.Errorf("the tool's cool-down does not hold b: %q", r)
	}
	s.Pause = &limits.Pause{At: t0}
	if r, _ := s.Blocked(b, t0.Add(time.Hour)); r != limits.ReasonPaused {
		t.Errorf("paused: %q", r)
	}
	s.Pause.Until = t0.Add(time.Minute)
	s.Prune(t0.Add(time.Hour))
	if !s.Empty() {
		t.Errorf("pruned after everything ended: %+v", s)
	}
}

// A cancelled call that waits starts before any other, whatever holds the
// tool (a pause, a full slot), and takes no slot: it is answered
// cancelled without running.
func TestCancelledStartsAtOnce(t *testing.T) {
	t.Parallel()
	p := plan(limits.Call{}, &limits.Limits{MaxInFlight: 1})
	var s limits.State
	if r := s.Admit(p, "running", "w", t0, lease); r != "" {
		t.Fatalf("first call: %q", r)
	}
	s.Pause = &limits.Pause{At: t0}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.Park(entry(id, p, t0)); err != nil {
			t.Fatal(err)
		}
	}
	if i, _ := s.Next(t0); i >= 0 {
		t.Fatalf("%s may start while paused and full", s.Queue[i].ID)
	}
	got := s.Cancel(t0, func(e *limits.Entry) bool { return e.ID != "a" })
	if len(got) != 2 || got[0].ID != "b" || got[1].ID != "c" {
		t.Fatalf("cancelled %+v", got)
	}
	for _, want := range []string{"b", "c"} {
		i, _ := s.Next(t0)
		if i < 0 || s.Queue[i].ID != want {
			t.Fatalf("next %d, want %s", i, want)
		}
		s.Claim(i, "w", t0, lease)
	}
	if n := s.Running(t0); n != 1 {
		t.Errorf("%d calls hold a slot, want the first alone", n)
	}
	if i, _ := s.Next(t0); i >= 0 {
		t.Errorf("%s may start: only the cancelled ones may", s.Queue[i].ID)
	}
}

// TestClone checks that a clone shares nothing a change alters: a change
// tried on it and dropped leaves the original as it was.
func TestClone(t *testing.T) {
	t.Parallel()
	p := plan(limits.Call{Tenant: "a"}, &limits.Limits{MaxInFlight: 1, Key: limits.KeyTenant,
		Rate: &limits.Rate{Limit: 1, Period: limits.Duration(time.Second)}, Fairness: &limits.Fairness{Key: limits.KeyTenant}})
	var s limits.State
	if r := s.Admit(p, "run", "w", t0, lease); r != "" {
		t.Fatal(r)
	}
	if _, err := s.Park(entry("wait", p, t0)); err != nil {
		t.Fatal(err)
	}
	s.Pause = &limits.Pause{By: "op", At: t0}
	before, _ := json.Marshal(&s)
	c := s.Clone()
	c.Release("run")
	c.Renew("w", map[string]bool{"wait": true}, t0.Add(time.Hour))
	c.Queue[0].Plan.Holds[0].Max = 9
	c.Pause.By = "else"
	c.CoolDown("", t0.Add(time.Minute))
	i, _ := c.Next(t0.Add(2 * time.Second))
	if i >= 0 {
		c.Claim(i, "w2", t0.Add(2*time.Second), lease)
	}
	c.Remove("wait")
	if after, _ := json.Marshal(&s); string(after) != string(before) {
		t.Fatalf("changes of the clone reached the original:\n%s\nwas\n%s", after, before)
	}
}

// TestMustWait checks that MustWait decides as Admit does, changing
// nothing: a key full or a waiting call that goes first holds the call, a
// free key admits it.
func TestMustWait(t *testing.T) {
	t.Parallel()
	l := &limits.Limits{MaxInFlight: 1, Key: limits.KeyTenant}
	a, b := plan(limits.Call{Tenant: "a"}, l), plan(limits.Call{Tenant: "b"}, l)
	var s limits.State
	if r := s.Admit(a, "a1", "w", t0, lease); r != "" {
		t.Fatal(r)
	}
	if _, err := s.Park(entry("b1", b, t0)); err != nil {
		t.Fatal(err)
	}
	before, _ := json.Marshal(&s)
	for _, c := range []struct {
		id   string
		p    limits.Plan
		want string
	}{
		{"a2", a, limits.ReasonMaxInFlight}, // a's key is full
		{"b2", b, limits.ReasonOrder},       // b1 waits and may start: it goes first
	} {
		if got := s.MustWait(c.p, c.id, t0); got != c.want {
			t.Errorf("MustWait(%s) = %q, want %q", c.id, got, c.want)
		}
	}
	if after, _ := json.Marshal(&s); string(after) != string(before) {
		t.Fatalf("MustWait changed the state:\n%s\nwas\n%s", after, before)
	}
	s.Remove("b1")
	if got := s.MustWait(b, "b2", t0); got != "" {
		t.Errorf("MustWait(b2) with b's key free = %q, want it to start", got)
	}
	if r := s.Admit(b, "b2", "w", t0, lease); r != "" {
		t.Errorf("Admit(b2) = %q after MustWait said it may start", r)
	}
}
