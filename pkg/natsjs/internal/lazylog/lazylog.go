// Package lazylog makes loggers whose attributes are formatted only once
// something is logged.
package lazylog

import (
	"context"
	"log/slog"
	"sync"
)

// With returns a logger like base.With(attrs...), except that the
// handler's WithAttrs (which formats the attributes ahead, for the
// standard handlers) runs only once something is logged: a worker makes a
// logger per task, and most tasks log nothing at the levels enabled.
func With(base *slog.Logger, attrs ...slog.Attr) *slog.Logger {
	return slog.New(&lazyHandler{base: base.Handler(), attrs: attrs})
}

// lazyHandler is a handler with attributes added on first use.
type lazyHandler struct {
	base  slog.Handler
	attrs []slog.Attr
	once  sync.Once
	h     slog.Handler
}

func (l *lazyHandler) handler() slog.Handler {
	l.once.Do(func() { l.h = l.base.WithAttrs(l.attrs) })
	return l.h
}

func (l *lazyHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.base.Enabled(ctx, level)
}

func (l *lazyHandler) Handle(ctx context.Context, r slog.Record) error {
	return l.handler().Handle(ctx, r)
}

func (l *lazyHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return l.handler().WithAttrs(attrs)
}

func (l *lazyHandler) WithGroup(name string) slog.Handler {
	return l.handler().WithGroup(name)
}
