package startstop

import (
	"errors"
	"sync"
	"testing"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	var b Base
	if b.Running() || closed(b.Done()) {
		t.Fatal("a new component runs or is stopped")
	}
	if err := b.StartInit(); err != nil || !b.Running() {
		t.Fatalf("start: %v, running %v", err, b.Running())
	}
	if err := b.StartInit(); !errors.Is(err, ErrStarted) {
		t.Fatalf("second start: %v", err)
	}
	boom := errors.New("boom")
	calls := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := b.Stop(func() error { calls++; return boom }); !errors.Is(err, boom) {
				t.Errorf("stop: %v, want the stop's error", err)
			}
		})
	}
	wg.Wait()
	if calls != 1 || b.Running() || !closed(b.Done()) {
		t.Fatalf("stop ran %d times, running %v", calls, b.Running())
	}
	if err := b.StartInit(); !errors.Is(err, ErrStarted) {
		t.Fatalf("start after stop: %v", err)
	}
}

func TestStopNeverStarted(t *testing.T) {
	t.Parallel()
	var b Base
	if err := b.Stop(func() error { t.Fatal("stop ran for a component never started"); return nil }); err != nil {
		t.Fatal(err)
	}
	if !closed(b.Done()) || b.StartInit() == nil {
		t.Fatal("a component stopped before its start is not stopped for good")
	}
}

func TestStartFailed(t *testing.T) {
	t.Parallel()
	var b Base
	if err := b.StartInit(); err != nil {
		t.Fatal(err)
	}
	b.StartFailed()
	if b.Running() || !closed(b.Done()) {
		t.Fatal("a failed start left the component running")
	}
	if err := b.Stop(func() error { t.Fatal("stop ran after a failed start"); return nil }); err != nil {
		t.Fatal(err)
	}
}
