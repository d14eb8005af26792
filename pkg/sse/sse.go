// Package sse writes Server-Sent Events streams: the one writer of agent
// serve's faces (the API's conversation events, the inbox's changes, the
// AG-UI face's events, the MCP face's tasks/result streams).
package sse

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Writer writes one Server-Sent Events stream. Once open, it writes a
// comment every heartbeat while nothing else is written, so that a
// client gone is noticed (the write fails, or its deadline passes: the
// web route wrapper's deadlineWriter sets one ahead of each write);
// [Writer.Close] stops that before the handler returns.
type Writer struct {
	w         http.ResponseWriter
	fl        http.Flusher
	heartbeat time.Duration

	mu   sync.Mutex // one write at a time: the events' and the heartbeat's
	stop chan struct{}
	done chan struct{} // closed when the heartbeat has stopped; nil until open
}

// ErrNoStreaming is the error of a response writer that cannot flush.
var ErrNoStreaming = errors.New("streaming unsupported")

// New returns the stream of w, its headers not written yet.
func New(w http.ResponseWriter, heartbeat time.Duration) (*Writer, error) {
	fl, ok := w.(http.Flusher)
	if !ok {
		return nil, ErrNoStreaming
	}
	return &Writer{w: w, fl: fl, heartbeat: heartbeat, stop: make(chan struct{})}, nil
}

// Open writes the stream's headers (200, text/event-stream, no caching)
// and, when comment is set, a comment line, and starts the heartbeat.
func (s *Writer) Open(comment string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	s.w.WriteHeader(http.StatusOK)
	if comment != "" {
		if _, err := fmt.Fprintf(s.w, ": %s\n\n", comment); err != nil {
			return err
		}
	}
	s.fl.Flush()
	s.done = make(chan struct{})
	go s.beat()
	return nil
}

// beat writes a comment every heartbeat until close.
func (s *Writer) beat() {
	defer close(s.done)
	t := time.NewTicker(s.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		_, err := fmt.Fprint(s.w, ": heartbeat\n\n")
		if err == nil {
			s.fl.Flush()
		}
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Close stops the heartbeat; the stream's handler calls it before it
// returns.
func (s *Writer) Close() {
	close(s.stop)
	if s.done != nil {
		<-s.done
	}
}

// Event writes one event: its id (when set), its name (when set) and its
// data on one line.
func (s *Writer) Event(id, name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if id != "" {
		_, err = fmt.Fprintf(s.w, "id: %s\n", id)
	}
	if err == nil && name != "" {
		_, err = fmt.Fprintf(s.w, "event: %s\n", name)
	}
	if err == nil {
		_, err = fmt.Fprintf(s.w, "data: %s\n\n", data)
	}
	if err != nil {
		return err
	}
	s.fl.Flush()
	return nil
}

// Signals opens the stream (with comment) and writes an event name with
// data {} for each signal of ch, until ch is closed or ctx ends (the
// client went).
func (s *Writer) Signals(ctx context.Context, ch <-chan struct{}, comment, name string) {
	if s.Open(comment) != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok || s.Event("", name, []byte("{}")) != nil {
				return
			}
		}
	}
}
