package offloadtest

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records what a helper reports; Fatalf ends the goroutine as
// testing's does.
type fakeTB struct {
	testing.TB
	failed atomic.Bool
	msg    atomic.Value
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed.Store(true)
	f.msg.Store(fmt.Sprintf(format, args...))
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	panic(fatal{})
}
func (f *fakeTB) Logf(string, ...any) {}

type fatal struct{}

// run calls fn with a fake TB and reports whether it failed, and how.
func run(fn func(tb testing.TB)) (failed bool, msg string) {
	f := &fakeTB{}
	func() {
		defer func() {
			if r := recover(); r != nil && r != (fatal{}) {
				panic(r)
			}
		}()
		fn(f)
	}()
	m, _ := f.msg.Load().(string)
	return f.failed.Load(), m
}

func TestWaitOrTimeout(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	if got := WaitOrTimeout(t, ch, "seven"); got != 7 {
		t.Fatalf("got %d", got)
	}
	failed, msg := run(func(tb testing.TB) { WaitOrTimeoutWithin(tb, make(chan int), time.Millisecond, "nothing") })
	if !failed || !strings.Contains(msg, "waiting for nothing") {
		t.Fatalf("an empty channel: failed %v, %q", failed, msg)
	}
}

func TestEventually(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	Eventually(t, "the third poll", func() bool { return n.Add(1) == 3 })
	Eventually(t, "the third poll", func() error {
		if n.Add(1) < 6 {
			return errors.New("not yet")
		}
		return nil
	})
	failed, msg := run(func(tb testing.TB) {
		EventuallyWithin(tb, 10*time.Millisecond, "the impossible", func() error { return errors.New("still 0") })
	})
	if !failed || !strings.Contains(msg, "waiting for the impossible: still 0") {
		t.Fatalf("a condition that never holds: failed %v, %q", failed, msg)
	}
	failed, msg = run(func(tb testing.TB) { EventuallyWithin(tb, 10*time.Millisecond, "false", func() bool { return false }) })
	if !failed || !strings.HasSuffix(msg, "waiting for false") {
		t.Fatalf("false: failed %v, %q", failed, msg)
	}
}

func TestWaitDead(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !alive(cmd.Process.Pid) {
		t.Fatal("a running process is not alive")
	}
	_ = cmd.Process.Kill()
	WaitDead(t, cmd.Process.Pid) // a zombie until Wait: dead
	_ = cmd.Wait()
	WaitDead(t, cmd.Process.Pid) // reaped: gone
}

func TestBound(t *testing.T) {
	t.Parallel()
	failed, _ := run(func(tb testing.TB) { Bound(tb, 2*time.Second, time.Second, "a step") })
	if failed != Soak {
		t.Fatalf("a bound exceeded failed the test: %v, want %v (soak)", failed, Soak)
	}
	if failed, _ := run(func(tb testing.TB) { Bound(tb, time.Second, time.Second, "a step") }); failed {
		t.Fatal("a bound met failed the test")
	}
}

func TestOutput(t *testing.T) {
	t.Parallel()
	var o Output
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.WaitFor(t, "ready")
	}()
	for _, s := range []string{"starting\n", "rea", "dy\n"} {
		if _, err := o.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	WaitOrTimeout(t, done, "the wait for ready to end")
	if o.String() != "starting\nready\n" {
		t.Fatalf("output %q", o.String())
	}
	o.WaitFor(t, "starting") // already written
}
