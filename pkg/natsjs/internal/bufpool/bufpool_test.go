package bufpool

import "testing"

// TestPoolBounded checks that the pool reuses buffers, keeps at most
// poolSize of them, and no buffer larger than maxPooled.
func TestPoolBounded(t *testing.T) {
	bp := New()
	b := bp.Get()
	data := append(*b, "payload"...)
	bp.Put(b, data)
	if again := bp.Get(); again != b || len(*again) != 0 || cap(*again) != cap(data) {
		t.Fatalf("the buffer given back was not reused empty: %p %d/%d", again, len(*again), cap(*again))
	}
	for range 2 * poolSize {
		b := bp.Get()
		bp.Put(b, *b)
	}
	held := make([]*[]byte, 0, 2*poolSize)
	for range 2 * poolSize {
		held = append(held, bp.Get())
	}
	for _, b := range held {
		bp.Put(b, *b)
	}
	if n := len(bp.free); n != poolSize {
		t.Fatalf("the pool keeps %d buffers, want %d", n, poolSize)
	}
	for len(bp.free) > 0 {
		<-bp.free
	}
	big := bp.Get()
	bp.Put(big, make([]byte, 0, maxPooled+1))
	if n := len(bp.free); n != 0 {
		t.Fatal("a buffer larger than maxPooled was kept")
	}
}
