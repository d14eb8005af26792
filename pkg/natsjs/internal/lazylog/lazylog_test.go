package lazylog

import (
	"bytes"
	"log/slog"
	"testing"
)

// TestWithLogsAsWith checks that a lazy logger writes what
// base.With(attrs...) writes, also through With and WithGroup, and that
// disabled levels stay disabled.
func TestWithLogsAsWith(t *testing.T) {
	write := func(l *slog.Logger) {
		l.Debug("hidden")
		l.Info("one", "k", 1)
		l.With("w", "x").WithGroup("g").Warn("two", "k", 2)
	}
	var want, got bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	eager := slog.New(slog.NewJSONHandler(&want, opts)).With("tool", "t")
	lazy := slog.New(slog.NewJSONHandler(&got, opts)).With("tool", "t")
	write(eager.With(slog.String("task_id", "A"), slog.Int("delivery", 2)))
	write(With(lazy, slog.String("task_id", "A"), slog.Int("delivery", 2)))
	if got.String() != want.String() || want.Len() == 0 {
		t.Fatalf("lazy logger wrote\n%s\nwant\n%s", got.String(), want.String())
	}
}
