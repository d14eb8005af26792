package convstore

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
)

// FailGets makes in's direct gets fail with "no responders" on the calls
// listed (counted from 1), as a read does in a cluster electing a leader,
// and returns how many were made so far.
func FailGets(in *Inbox, fail map[int]bool) (calls func() int) {
	var mu sync.Mutex
	n := 0
	get := in.get
	in.get = func(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64, next bool) (*storedMsg, error) {
		mu.Lock()
		n++
		f := fail[n]
		mu.Unlock()
		if f {
			return nil, nats.ErrNoResponders
		}
		return get(ctx, nc, stream, filter, from, next)
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
