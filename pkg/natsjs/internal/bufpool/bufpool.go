// Package bufpool recycles the buffers that tasks and results are encoded
// into before they are published, holding a bounded amount of memory
// whatever the burst.
package bufpool

// Pool recycles the buffers that tasks and results are encoded into
// before they are published. nats.go copies a message's data into its
// write buffer as it publishes, so a buffer is free again once the
// publish call has returned. The pool keeps at most poolSize buffers of
// at most maxPooled bytes: unlike a sync.Pool, which keeps every buffer
// of a burst until two garbage collections have passed (10 000 background
// calls dispatched at once would leave 10 000 buffers behind), it holds a
// bounded amount of memory whatever the burst; buffers beyond it are left
// to the garbage collector. The zero value is not ready: use [New]. A Pool
// is safe for concurrent use.
type Pool struct{ free chan *[]byte }

const (
	poolSize  = 64
	maxPooled = 64 << 10
)

// New returns an empty pool.
func New() Pool { return Pool{free: make(chan *[]byte, poolSize)} }

// Get returns an empty buffer.
func (bp Pool) Get() *[]byte {
	select {
	case b := <-bp.free:
		return b
	default:
		b := make([]byte, 0, 1024)
		return &b
	}
}

// Put gives back a buffer got from Get, holding data (the buffer's
// contents, possibly grown) which is no longer used.
func (bp Pool) Put(b *[]byte, data []byte) {
	if cap(data) > maxPooled {
		return
	}
	*b = data[:0]
	select {
	case bp.free <- b:
	default: // the pool is full
	}
}
