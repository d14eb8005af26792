package builtin

import (
	"context"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/offload-dev/offload/pkg/progress"
	"github.com/offload-dev/offload/pkg/tool"
)

// SleepArgs are the arguments of sleep.
type SleepArgs struct {
	// Seconds is how long to sleep, 0 to [MaxSleepSeconds].
	Seconds float64 `json:"seconds" jsonschema:"How long to sleep, in seconds (0 to 3600)."`
	// Message is returned when the sleep is over.
	Message string `json:"message,omitempty" jsonschema:"A message to return when the sleep is over."`
}

// SleepResult is the result of sleep.
type SleepResult struct {
	// SleptSeconds is how long the tool slept.
	SleptSeconds float64 `json:"slept_seconds"`
	// Message is the message of the arguments.
	Message string `json:"message,omitempty"`
}

func sleepTool(cfg Config) (*tool.Tool, error) {
	run := func(ctx context.Context, _ *tool.RunContext, a SleepArgs) (SleepResult, error) {
		return sleep(ctx, cfg.SleepProgressInterval, a)
	}
	t, err := tool.NewFunc(NameSleep,
		"Sleep for a number of seconds, reporting progress, then return the message given. For demonstrations and tests.",
		run, tool.Meta(map[string]any{"background": "optional"}), tool.Idempotent(), tool.Timeout(SleepTimeout)) // no side effect
	if err != nil {
		return nil, err
	}
	return constrain(t, func(p map[string]*jsonschema.Schema) {
		p["seconds"].Minimum = jsonschema.Ptr(0.0)
		p["seconds"].Maximum = jsonschema.Ptr(float64(MaxSleepSeconds))
	})
}

// sleep waits a.Seconds, reporting progress every interval through the
// context's progress reporter.
func sleep(ctx context.Context, interval time.Duration, a SleepArgs) (SleepResult, error) {
	if a.Seconds < 0 || a.Seconds > MaxSleepSeconds {
		return SleepResult{}, fail("sleep: seconds must be between 0 and %d, got %g", MaxSleepSeconds, a.Seconds)
	}
	total := time.Duration(a.Seconds * float64(time.Second))
	start := time.Now()
	done := time.NewTimer(total)
	defer done.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return SleepResult{}, ctxErr(ctx, NameSleep)
		case <-done.C:
			return SleepResult{SleptSeconds: a.Seconds, Message: a.Message}, nil
		case <-tick.C:
			// Ticks may be dropped under load: report the time elapsed,
			// rounded to the interval, not the ticks counted.
			slept := time.Since(start).Round(interval)
			if slept <= 0 || slept >= total {
				continue // done fires next
			}
			progress.Report(ctx, fmt.Sprintf("slept %s of %s", slept, total),
				progress.Fraction(float64(slept)/float64(total)))
		}
	}
}
