package natsjs

import "testing"

// TestBufPoolBounded checks that the pool reuses buffers, keeps at most
// bufPoolSize of them, and no buffer larger than maxPooledBuf.
func TestBufPoolBounded(t *testing.T) {
	bp := newBufPool()
	b := bp.get()
	data := append(*b, "payload"...)
	bp.put(b, data)
	if again := bp.get(); again != b || len(*again) != 0 || cap(*again) != cap(data) {
		t.Fatalf("the buffer given back was not reused empty: %p %d/%d", again, len(*again), cap(*again))
	}
	for range 2 * bufPoolSize {
		b := bp.get()
		bp.put(b, *b)
	}
	held := make([]*[]byte, 0, 2*bufPoolSize)
	for range 2 * bufPoolSize {
		held = append(held, bp.get())
	}
	for _, b := range held {
		bp.put(b, *b)
	}
	if n := len(bp.free); n != bufPoolSize {
		t.Fatalf("the pool keeps %d buffers, want %d", n, bufPoolSize)
	}
	for len(bp.free) > 0 {
		<-bp.free
	}
	big := bp.get()
	bp.put(big, make([]byte, 0, maxPooledBuf+1))
	if n := len(bp.free); n != 0 {
		t.Fatal("a buffer larger than maxPooledBuf was kept")
	}
}
