package web

import (
	"errors"
	"fmt"
	"net/http"
)

// sse writes a Server-Sent Events stream: the one writer of the API's
// conversation events and the inbox's changes.
type sse struct {
	w  http.ResponseWriter
	fl http.Flusher
}

// errNoStreaming is the error of a response writer that cannot flush.
var errNoStreaming = errors.New("streaming unsupported")

// newSSE returns the stream of w, its headers not written yet.
func newSSE(w http.ResponseWriter) (*sse, error) {
	fl, ok := w.(http.Flusher)
	if !ok {
		return nil, errNoStreaming
	}
	return &sse{w: w, fl: fl}, nil
}

// open writes the stream's headers (200, text/event-stream, no caching)
// and, when comment is set, a comment line.
func (s *sse) open(comment string) error {
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
	return nil
}

// event writes one event: its id (when set), its name (when set) and its
// data on one line.
func (s *sse) event(id, name string, data []byte) error {
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

// signals opens the stream (with comment) and writes an event name with
// data {} for each signal of ch, until ch is closed or the client goes.
func (s *sse) signals(ch <-chan struct{}, comment, name string) {
	if s.open(comment) != nil {
		return
	}
	for range ch {
		if s.event("", name, []byte("{}")) != nil {
			return // the client went
		}
	}
}
