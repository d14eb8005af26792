package progress_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/progress"
)

type call struct {
	msg  string
	frac *float64
}

func TestReportWithoutReporterIsNoop(t *testing.T) {
	t.Parallel()
	progress.Report(context.Background(), "nobody listens", progress.Fraction(0.5))
	if _, ok := progress.FromContext(context.Background()); ok {
		t.Fatal("FromContext found a reporter in an empty context")
	}
	ctx := progress.WithReporter(context.Background(), nil)
	if _, ok := progress.FromContext(ctx); ok {
		t.Fatal("WithReporter(nil) stored a reporter")
	}
}

func TestReportClampsFraction(t *testing.T) {
	t.Parallel()
	var got []call
	ctx := progress.WithReporter(context.Background(), progress.ReporterFunc(func(m string, f *float64) {
		got = append(got, call{m, f})
	}))
	progress.Report(ctx, "a", nil)
	progress.Report(ctx, "b", progress.Fraction(-1))
	progress.Report(ctx, "c", progress.Fraction(0.25))
	progress.Report(ctx, "d", progress.Fraction(7))
	want := []struct {
		msg  string
		frac float64
		nil  bool
	}{{"a", 0, true}, {"b", 0, false}, {"c", 0.25, false}, {"d", 1, false}}
	if len(got) != len(want) {
		t.Fatalf("got %d reports, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].msg != w.msg || (got[i].frac == nil) != w.nil || (!w.nil && *got[i].frac != w.frac) {
			t.Errorf("report %d = %q %v, want %q %v (nil=%v)", i, got[i].msg, got[i].frac, w.msg, w.frac, w.nil)
		}
	}
}

func ExampleReport() {
	r := progress.ReporterFunc(func(msg string, fraction *float64) {
		if fraction == nil {
			fmt.Println(msg)
			return
		}
		fmt.Printf("%s (%.0f%%)\n", msg, *fraction*100)
	})
	ctx := progress.WithReporter(context.Background(), r)

	progress.Report(ctx, "downloading", nil)
	progress.Report(ctx, "downloaded 3 of 4 files", progress.Fraction(0.75))
	// Output:
	// downloading
	// downloaded 3 of 4 files (75%)
}

type taskRecorder struct{ got []string }

func (r *taskRecorder) Report(message string, _ *float64) { r.got = append(r.got, "report:"+message) }
func (r *taskRecorder) ReportTask(taskID, message string, fraction *float64) {
	r.got = append(r.got, fmt.Sprintf("task:%s:%s:%v", taskID, message, *fraction))
}

func TestReportTask(t *testing.T) {
	t.Parallel()
	progress.ReportTask(context.Background(), "t", "nobody listens", nil) // no reporter: no-op
	tr := &taskRecorder{}
	ctx := progress.WithReporter(context.Background(), tr)
	progress.ReportTask(ctx, "01J", "half", progress.Fraction(1.5))
	progress.Report(ctx, "plain", nil)
	if got := strings.Join(tr.got, ","); got != "task:01J:half:1,report:plain" {
		t.Fatalf("got %s", got)
	}
	var plain []string
	ctx = progress.WithReporter(context.Background(), progress.ReporterFunc(func(m string, _ *float64) { plain = append(plain, m) }))
	progress.ReportTask(ctx, "01J", "relayed", nil)
	if len(plain) != 1 || plain[0] != "relayed" {
		t.Fatalf("plain reporter got %v", plain)
	}
}
