package convstore

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
)

// FailGets makes in's direct gets on stream fail with the errors listed
// by call (counted from 1 on that stream: Collect reads the streams at
// once), such as the "no responders" of a cluster electing a leader, and
// returns how many gets were made so far on every stream.
func FailGets(in *Inbox, stream string, fail map[int]error) (calls func() int) {
	var mu sync.Mutex
	n, on := 0, 0
	get := in.get
	in.get = func(ctx context.Context, nc *nats.Conn, s, filter string, from uint64, next bool) (*storedMsg, error) {
		mu.Lock()
		n++
		var f error
		if s == stream {
			on++
			f = fail[on]
		}
		mu.Unlock()
		if f != nil {
			return nil, f
		}
		return get(ctx, nc, s, filter, from, next)
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// Holdings returns how many conversations s keeps what it knows of (the
// leases it holds) and how many history objects it remembers.
func Holdings(s *Store) (held, objects int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held), len(s.objects)
}

// FailFirstGetAfter makes in's first direct get on stream wait until n
// gets on stream other have returned, then fail with err.
func FailFirstGetAfter(in *Inbox, stream string, err error, other string, n int) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	first, onOther := true, 0
	get := in.get
	in.get = func(ctx context.Context, nc *nats.Conn, s, filter string, from uint64, next bool) (*storedMsg, error) {
		mu.Lock()
		if s == stream && first {
			first = false
			for onOther < n {
				cond.Wait()
			}
			mu.Unlock()
			return nil, err
		}
		mu.Unlock()
		m, gerr := get(ctx, nc, s, filter, from, next)
		if s == other {
			mu.Lock()
			onOther++
			cond.Broadcast()
			mu.Unlock()
		}
		return m, gerr
	}
}
