package convstore

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Publisher publishes decisions and answers as a person or a UI does
// (SPEC §5.2, `agent approve|deny|answer`): on the subject of the task, with
// its Nats-Msg-Id, so that one published twice is stored once. It does not
// check them against the conversation: check them with
// conversation.State.Admit first, as the run that reads them will.
type Publisher struct {
	js   jetstream.JetStream
	subj protocol.Subjects
}

// NewPublisher returns a publisher for prefix ("" is the default).
func NewPublisher(js jetstream.JetStream, prefix string) *Publisher {
	return &Publisher{js: js, subj: protocol.Subjects{Prefix: prefix}}
}

// Publish publishes data, a decision (kind conversation.ArrivalDecision)
// or an answer (conversation.ArrivalAnswer), for task of conversation conv
// and returns its subject. A stream electing a leader (a cluster node
// died) answers no publish for a few seconds: Publish waits that out, as
// the conversation store does.
func (p *Publisher) Publish(ctx context.Context, kind conversation.ArrivalKind, conv, task string, data []byte) (string, error) {
	var subject, id string
	switch kind {
	case conversation.ArrivalDecision:
		subject, id = p.subj.Decision(conv, task), protocol.DecisionMsgID(conv, task)
	case conversation.ArrivalAnswer:
		subject, id = p.subj.Answer(conv, task), protocol.AnswerMsgID(conv, task)
	default:
		return "", fmt.Errorf("natsjs: publish: %q is not published by hand", kind)
	}
	if _, err := p.js.Publish(ctx, subject, data, jetstream.WithMsgID(id),
		jetstream.WithRetryWait(250*time.Millisecond), jetstream.WithRetryAttempts(60)); err != nil {
		return subject, fmt.Errorf("natsjs: publish on %s: %w", subject, err)
	}
	return subject, nil
}
