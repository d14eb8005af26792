package natsjs

import "sync"

// bufPool recycles the buffers that tasks and results are encoded into
// before they are published. nats.go copies a message's data into its
// write buffer as it publishes, so a buffer is free again once the
// publish call has returned. Buffers that grew past maxPooledBuf (a large
// result) are left to the garbage collector rather than kept.
type bufPool struct{ p sync.Pool }

const maxPooledBuf = 64 << 10

// get returns an empty buffer.
func (bp *bufPool) get() *[]byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 1024)
	return &b
}

// put gives back a buffer got from get, holding data (the buffer's
// contents, possibly grown) which is no longer used.
func (bp *bufPool) put(b *[]byte, data []byte) {
	if cap(data) > maxPooledBuf {
		return
	}
	*b = data[:0]
	bp.p.Put(b)
}
