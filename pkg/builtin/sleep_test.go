package builtin_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/progress"
)

type report struct {
	msg  string
	frac float64
}

// recorder is a progress.Reporter keeping reports and signalling the first.
type recorder struct {
	mu      sync.Mutex
	reports []report
	first   chan struct{}
	once    sync.Once
}

func newRecorder() *recorder { return &recorder{first: make(chan struct{})} }

func (r *recorder) Report(msg string, frac *float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := -1.0
	if frac != nil {
		f = *frac
	}
	r.reports = append(r.reports, report{msg, f})
	r.once.Do(func() { close(r.first) })
}

func (r *recorder) all() []report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]report(nil), r.reports...)
}

// TestSleepReportsProgress runs on synctest's clock: the sleep takes
// exactly its 100 ms, and no real time.
func TestSleepReportsProgress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sl := toolsFor(t, builtin.Config{Root: t.TempDir(), SleepProgressInterval: 10 * time.Millisecond})["sleep"]
		rec := newRecorder()
		ctx := progress.WithReporter(t.Context(), rec)
		start := time.Now()
		out, err := call(ctx, t, sl, `{"seconds":0.1,"message":"done"}`)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Errorf("slept only %s", d)
		}
		if r := out.(builtin.SleepResult); r != (builtin.SleepResult{SleptSeconds: 0.1, Message: "done"}) {
			t.Errorf("result = %+v", r)
		}
		reports := rec.all()
		if len(reports) == 0 {
			t.Fatal("no progress reported")
		}
		prev := 0.0
		for _, r := range reports {
			if !strings.HasPrefix(r.msg, "slept ") || !strings.HasSuffix(r.msg, "0ms of 100ms") || r.frac < prev || r.frac <= 0 || r.frac >= 1 {
				t.Errorf("report %+v (previous fraction %v)", r, prev)
			}
			prev = r.frac
		}
	})
}

func TestSleepZeroAndWithoutReporter(t *testing.T) {
	t.Parallel()
	sl := toolsFor(t, builtin.Config{Root: t.TempDir()})["sleep"]
	out, err := call(t.Context(), t, sl, `{"seconds":0}`)
	if err != nil || out.(builtin.SleepResult).SleptSeconds != 0 {
		t.Errorf("sleep 0: %v %v", out, err)
	}
}

// TestSleepCancel runs on synctest's clock: an hour's sleep is cancelled
// once it has reported progress.
func TestSleepCancel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sl := toolsFor(t, builtin.Config{Root: t.TempDir(), SleepProgressInterval: time.Millisecond})["sleep"]
		rec := newRecorder()
		ctx, cancel := context.WithCancel(progress.WithReporter(t.Context(), rec))
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := call(ctx, t, sl, `{"seconds":3600}`)
			done <- err
		}()
		offloadtest.WaitOrTimeout(t, rec.first, "the first progress report")
		cancel()
		if err := offloadtest.WaitOrTimeout(t, done, "the sleep to return after the cancel"); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
}

func TestSleepBounds(t *testing.T) {
	t.Parallel()
	sl := toolsFor(t, builtin.Config{Root: t.TempDir()})["sleep"]
	for _, args := range []string{`{"seconds":-1}`, `{"seconds":3601}`, `{}`, `{"seconds":"1"}`} {
		if _, err := sl.ParseArgs(args); err == nil {
			t.Errorf("%s accepted by the schema", args)
		}
	}
	// The body checks too, for callers that skip schema validation.
	_, err := sl.Run(t.Context(), nil, []byte(`{"seconds":4000}`))
	wantFail(t, err, "between 0 and 3600")
}

// TestSleepIsOptionalBackground: the model may choose to run sleep in the
// background (SPEC §6.1).
func TestSleepIsOptionalBackground(t *testing.T) {
	t.Parallel()
	sl := toolsFor(t, builtin.Config{Root: t.TempDir()})["sleep"]
	if got := sl.Metadata["background"]; got != "optional" {
		t.Errorf("sleep metadata background = %v, want \"optional\"", got)
	}
}
