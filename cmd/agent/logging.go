package main

import (
	"context"
	"log/slog"
)

// quietDuplicates lowers the inbox's "message refused" records whose
// reason is duplicate from Warn to Info (shown with -v): a second copy of
// a decision or result is at-least-once delivery at work (the first one
// won, and the refusal is counted in offload_refused_messages_total), not
// something a user must act on. Other refusals (unknown task, malformed,
// wrong kind, …) stay warnings.
type quietDuplicates struct{ slog.Handler }

func (h quietDuplicates) Enabled(ctx context.Context, l slog.Level) bool {
	// Decided per record in Handle: a duplicate's Warn may become Info.
	return h.Handler.Enabled(ctx, l) || l == slog.LevelWarn
}

func (h quietDuplicates) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && r.Message == "message refused" {
		dup := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" && a.Value.String() == "duplicate" {
				dup = true
				return false
			}
			return true
		})
		if dup {
			r.Level = slog.LevelInfo
		}
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietDuplicates) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietDuplicates{h.Handler.WithAttrs(attrs)}
}

func (h quietDuplicates) WithGroup(name string) slog.Handler {
	return quietDuplicates{h.Handler.WithGroup(name)}
}

// inboxLogger returns log with duplicate refusals lowered to Info.
func inboxLogger(log *slog.Logger) *slog.Logger {
	return slog.New(quietDuplicates{log.Handler()})
}
