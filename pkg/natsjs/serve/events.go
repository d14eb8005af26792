package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The run events of the service's conversations (SPEC §6.3) live in the
// events stream (natsjs.Names.Events), one subject per conversation,
// <prefix>.event.<conv>, kept a day: any replica serves a conversation's
// Server-Sent Events, whichever replica runs it, and a client resumes
// from its Last-Event-ID (the event's sequence in the stream) on any
// replica.

// eventSubject is the subject of conversation conv's events.
func (s *Service) eventSubject(conv string) string {
	return natsjs.NamesFor(s.cfg.Provision.Prefix).Prefix + ".event." + conv
}

// Watch calls fn with each event of conversation conv stored after
// sequence after (0: only those stored from now on), in order, with its
// sequence, until fn returns false, the conversation's next final event
// has been given, or ctx ends. ready, if set, is called once the watch
// has begun: no event stored after it is missed.
func (s *Service) Watch(ctx context.Context, conv string, after uint64, ready func(), fn func(seq uint64, event json.RawMessage) bool) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.eventSubject(conv)}, DeliverPolicy: jetstream.DeliverNewPolicy}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	c, err := s.cfg.JetStream.OrderedConsumer(ctx, natsjs.NamesFor(s.cfg.Provision.Prefix).Events, cfg)
	if err != nil {
		return fmt.Errorf("serve: watch conversation %s: %w", conv, err)
	}
	it, err := c.Messages()
	if err != nil {
		return fmt.Errorf("serve: watch conversation %s: %w", conv, err)
	}
	if ready != nil {
		ready()
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		it.Stop()
	}()
	for {
		m, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(m.Data(), &head)
		if !fn(meta.Sequence.Stream, m.Data()) || head.Type == string(agent.EventFinal) {
			return nil
		}
	}
}

// events serves GET /v1/conversations/{id}/events: Server-Sent Events,
// one §6.3 event per data line with its id; Last-Event-ID resumes; the
// stream ends after the conversation's next final event.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	conv := r.PathValue("id")
	if _, err := protocol.ParseID(conv); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	var after uint64
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		n, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "Last-Event-ID: not an event id")
			return
		}
		after = n
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "internal", "streaming unsupported")
		return
	}
	began := false
	err := h.Service.Watch(r.Context(), conv, after, func() {
		began = true
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		flusher.Flush()
	}, func(seq uint64, ev json.RawMessage) bool {
		if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", seq, ev); err != nil {
			return false
		}
		flusher.Flush()
		return true
	})
	if err != nil && !began {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	if err != nil && r.Context().Err() == nil {
		h.Logger.Warn("events", slog.String("conversation_id", conv), slog.Any("error", err))
	}
}
