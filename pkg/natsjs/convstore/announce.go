package convstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Announcer publishes what people and UIs watch on
// <prefix>.approval.<conv>.<task> (SPEC §5.2): an announcement for each
// call waiting for approval, and its resolution once it is decided,
// answered or withdrawn.
type Announcer struct {
	js   jetstream.JetStream
	subj protocol.Subjects
}

// NewAnnouncer returns an announcer for prefix ("" is the default).
func NewAnnouncer(js jetstream.JetStream, prefix string) *Announcer {
	return &Announcer{js: js, subj: protocol.Subjects{Prefix: prefix}}
}

// Announce publishes an announcement for every approval of rec. Each
// carries the header Nats-Msg-Id "approval:<task>", so announcing a
// pause again within the duplicate window stores nothing twice.
func (a *Announcer) Announce(ctx context.Context, rec *deferred.PendingRecord) error {
	if rec == nil {
		return nil
	}
	now := time.Now().UTC()
	for _, t := range rec.Tasks {
		if t.Kind != deferred.KindApproval {
			continue
		}
		args := t.Args
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		msg := protocol.Approval{TaskID: t.TaskID, ToolCallID: t.ToolCallID, Tool: t.Tool, Args: args, Metadata: t.Metadata,
			ConversationID: rec.ConversationID, RunID: rec.RunID, RequestedAt: now}
		if err := a.publish(ctx, a.subj.Approval(rec.ConversationID, t.TaskID), "approval:"+t.TaskID, msg); err != nil {
			return err
		}
	}
	return nil
}

// Resolve publishes the resolution of the approval of task in conversation
// conv.
func (a *Announcer) Resolve(ctx context.Context, conv string, r protocol.Resolution) error {
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	return a.publish(ctx, a.subj.Approval(conv, r.TaskID), "resolved:"+r.TaskID, r)
}

func (a *Announcer) publish(ctx context.Context, subject, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("natsjs: marshal %s: %w", subject, err)
	}
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = data
	if _, err := a.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("natsjs: publish %s: %w", subject, err)
	}
	return nil
}
