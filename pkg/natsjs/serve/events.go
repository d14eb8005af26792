package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/natsjs"
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
	c, err := s.cfg.Watches.OrderedConsumer(ctx, natsjs.NamesFor(s.cfg.Provision.Prefix).Events, cfg)
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
