package natsjs

// bufPool recycles the buffers that tasks and results are encoded into
// before they are published. nats.go copies a message's data into its
// write buffer as it publishes, so a buffer is free again once the
// publish call has returned. The pool keeps at most bufPoolSize buffers of
// at most maxPooledBuf bytes: unlike a sync.Pool, which keeps every buffer
// of a burst until two garbage collections have passed (10 000 background
// calls dispatched at once would leave 10 000 buffers behind), it holds a
// bounded amount of memory whatever the burst; buffers beyond it are left
// to the garbage collector. The zero value is not ready: use newBufPool.
type bufPool struct{ free chan *[]byte }

const (
	bufPoolSize  = 64
	maxPooledBuf = 64 << 10
)

func newBufPool() bufPool { return bufPool{free: make(chan *[]byte, bufPoolSize)} }

// get returns an empty buffer.
func (bp bufPool) get() *[]byte {
	select {
	case b := <-bp.free:
		return b
	default:
		b := make([]byte, 0, 1024)
		return &b
	}
}

// put gives back a buffer got from get, holding data (the buffer's
// contents, possibly grown) which is no longer used.
func (bp bufPool) put(b *[]byte, data []byte) {
	if cap(data) > maxPooledBuf {
		return
	}
	*b = data[:0]
	select {
	case bp.free <- b:
	default: // the pool is full
	}
}
