package openaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Reply is one scripted answer of a [Replay] server, written as is: the
// shapes real providers send, including the malformed ones.
type Reply struct {
	// Status is the HTTP status; default 200.
	Status int
	// Header holds extra response headers (e.g. Retry-After).
	Header map[string]string
	// Body is the response body. For a stream, each server-sent event
	// (each piece ending in a blank line) is written and flushed in turn.
	Body string
	// Stream marks Body as a server-sent event stream
	// (Content-Type: text/event-stream); else it is JSON.
	Stream bool
	// Stall keeps the connection open after Body, writing nothing more,
	// until the client goes away or the server closes: a silent server.
	Stall bool
	// Cut aborts the connection after Body, without a clean end.
	Cut bool
}

// Replay is a loopback HTTP server answering POST /v1/chat/completions
// with scripted [Reply]s, in order, and recording the requests. A request
// beyond the script is answered 500 "replay exhausted".
type Replay struct {
	srv  *httptest.Server
	stop chan struct{}
	once sync.Once

	mu       sync.Mutex
	replies  []Reply
	requests []RecordedRequest
}

// NewReplay starts a Replay server on a loopback port. Close it when done.
func NewReplay(replies ...Reply) *Replay {
	r := &Replay{replies: replies, stop: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", r.chat)
	r.srv = httptest.NewServer(mux)
	return r
}

// URL returns the base URL clients use, ending in /v1.
func (r *Replay) URL() string { return r.srv.URL + "/v1" }

// Close releases stalled handlers and shuts the server down.
func (r *Replay) Close() {
	r.once.Do(func() { close(r.stop) })
	r.srv.CloseClientConnections()
	r.srv.Close()
}

// Requests returns the requests received so far, in order.
func (r *Replay) Requests() []RecordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RecordedRequest(nil), r.requests...)
}

func (r *Replay) chat(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 32<<20))
	r.mu.Lock()
	r.requests = append(r.requests, RecordedRequest{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Body: body})
	var rep Reply
	ok := len(r.replies) > 0
	if ok {
		rep, r.replies = r.replies[0], r.replies[1:]
	}
	r.mu.Unlock()
	if !ok {
		writeError(w, &apiError{status: 500, Message: "replay exhausted", Type: "server_error"})
		return
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	if rep.Stream {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
	} else if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	flush()
	if rep.Stream {
		for _, ev := range splitEvents(rep.Body) {
			if _, err := io.WriteString(w, ev); err != nil {
				return
			}
			flush()
		}
	} else {
		_, _ = io.WriteString(w, rep.Body)
		flush()
	}
	switch {
	case rep.Stall:
		select {
		case <-req.Context().Done():
		case <-r.stop:
		}
	case rep.Cut:
		panic(http.ErrAbortHandler)
	}
}

// splitEvents splits an SSE body after each blank line, keeping every byte.
func splitEvents(body string) []string {
	var out []string
	for body != "" {
		i := strings.Index(body, "\n\n")
		if i < 0 {
			out = append(out, body)
			break
		}
		out = append(out, body[:i+2])
		body = body[i+2:]
	}
	return out
}

// SSE renders chunks as a server-sent event stream: each as "data: " +
// chunk + a blank line. A chunk beginning with ':' is written as a comment
// line; "[DONE]" is written as the end marker.
func SSE(chunks ...string) string {
	var b bytes.Buffer
	for _, c := range chunks {
		if strings.HasPrefix(c, ":") {
			fmt.Fprintf(&b, "%s\n\n", c)
			continue
		}
		fmt.Fprintf(&b, "data: %s\n\n", c)
	}
	return b.String()
}

// ValidateRequest checks a chat completion request body as strictly as
// [Server] does (and OpenAI would), returning the 400 message it would
// answer, or nil.
func ValidateRequest(body []byte) error {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if apiErr := req.validate(); apiErr != nil {
		return apiErr
	}
	return nil
}
