package convstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
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
	return p.publish(ctx, kind, conv, task, data, anyway, "")
}

// PublishFirst publishes as [Publisher.Publish] does, only if no decision
// or answer is stored for the task yet (first wins, checked by the
// server: the expected last sequence of the subject is 0): one is an
// error wrapping natsjs.ErrAlreadyAnswered, as is a copy the duplicate
// window drops.
func (p *Publisher) PublishFirst(ctx context.Context, kind conversation.ArrivalKind, conv, task string, data []byte) (string, error) {
	return p.publish(ctx, kind, conv, task, data, firstWins, "")
}

// PublishFirstSigned is [Publisher.PublishFirst] of a decision with its
// signature sig (SignatureHeader; "" for none).
func (p *Publisher) PublishFirstSigned(ctx context.Context, kind conversation.ArrivalKind, conv, task string, data []byte, sig string) (string, error) {
	return p.publish(ctx, kind, conv, task, data, firstWins, sig)
}

// PublishVote publishes data, a decision of a call that needs a quorum
// (SPEC §12), for task of conversation conv beside the approvals already
// stored: once per key (an approval's identity, [Identities.VoteKey];
// "denied"); a copy the duplicate window drops is a
// *conversation.RefusedError, duplicate_identity. sig, if set, is its
// signature (SignatureHeader).
func (p *Publisher) PublishVote(ctx context.Context, conv, task, key string, data []byte, sig string) (string, error) {
	subject := p.subj.Decision(conv, task)
	m := nats.NewMsg(subject)
	m.Data = data
	if sig != "" {
		m.Header.Set(SignatureHeader, sig)
	}
	telemetry.Inject(ctx, m.Header)
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithMsgID(protocol.DecisionMsgID(conv, task)+"."+key),
		jetstream.WithRetryWait(250*time.Millisecond), jetstream.WithRetryAttempts(60))
	switch {
	case err != nil:
		return subject, fmt.Errorf("natsjs: publish on %s: %w", subject, natsjs.Limited(err))
	case ack.Duplicate:
		return subject, &conversation.RefusedError{Reason: conversation.ReasonDuplicateIdentity, TaskID: task, Err: fmt.Errorf("%s: already published for the call", key)}
	}
	return subject, nil
}

// The orders of a publish: anyway, or first wins (the subject holds no
// message), or after the message of a given sequence (its last).
const (
	anyway    int64 = -1
	firstWins int64 = 0
)

// publishAfter publishes as [Publisher.PublishFirstSigned] does, but only
// if the subject's last message is the one of sequence seq (the server
// checks it): for a decision or an answer after a message the run will
// refuse (a forged timeout, a malformed one), which must not keep people
// from deciding.
func (p *Publisher) publishAfter(ctx context.Context, kind conversation.ArrivalKind, conv, task string, data []byte, sig string, seq uint64) (string, error) {
	return p.publish(ctx, kind, conv, task, data, int64(seq), sig) //nolint:gosec // a stream sequence is far below 2^63
}

// publish publishes data on the subject of kind for task of conversation
// conv, in order after (anyway, firstWins, or after the last message of
// that sequence), with signature sig if set.
func (p *Publisher) publish(ctx context.Context, kind conversation.ArrivalKind, conv, task string, data []byte, after int64, sig string) (string, error) {
	first := after >= 0
	var subject, id string
	switch kind {
	case conversation.ArrivalDecision:
		subject, id = p.subj.Decision(conv, task), protocol.DecisionMsgID(conv, task)
	case conversation.ArrivalAnswer:
		subject, id = p.subj.Answer(conv, task), protocol.AnswerMsgID(conv, task)
	default:
		return "", fmt.Errorf("natsjs: publish: %q is not published by hand", kind)
	}
	if after > 0 {
		id += ".after." + strconv.FormatInt(after, 10) // not a copy of what it follows
	}
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id), jetstream.WithRetryWait(250 * time.Millisecond), jetstream.WithRetryAttempts(60)}
	if first {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(uint64(after)))
	}
	m := nats.NewMsg(subject)
	m.Data = data
	if sig != "" {
		m.Header.Set(SignatureHeader, sig)
	}
	telemetry.Inject(ctx, m.Header) // the publisher's trace context, when traced (SPEC §14)
	ack, err := p.js.PublishMsg(ctx, m, opts...)
	var je jetstream.JetStreamError
	switch {
	case first && errors.As(err, &je) && je.APIError() != nil &&
		(je.APIError().ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || je.APIError().ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return subject, fmt.Errorf("natsjs: publish on %s: %w", subject, natsjs.ErrAlreadyAnswered)
	case err != nil:
		return subject, fmt.Errorf("natsjs: publish on %s: %w", subject, natsjs.Limited(err))
	case first && ack.Duplicate:
		// Only a message stored earlier is a duplicate: a retry follows
		// a publish that no server answered.
		return subject, fmt.Errorf("natsjs: publish on %s: %w", subject, natsjs.ErrAlreadyAnswered)
	}
	return subject, nil
}
