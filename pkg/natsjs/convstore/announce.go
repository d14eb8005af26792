package convstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/telemetry"
)

// Announcer publishes what people and UIs watch on
// <prefix>.approval.<conv>.<task> (SPEC §5.2): an announcement for each
// call waiting for approval, and its resolution once it is decided,
// answered or withdrawn.
type Announcer struct {
	js    jetstream.JetStream
	subj  protocol.Subjects
	names natsjs.Names
	// metrics, when set, counts the announcements the approvals stream
	// refuses at a limit.
	metrics *metrics.Agent
}

// NewAnnouncer returns an announcer for prefix ("" is the default).
func NewAnnouncer(js jetstream.JetStream, prefix string) *Announcer {
	return &Announcer{js: js, subj: protocol.Subjects{Prefix: prefix}, names: natsjs.NamesFor(prefix)}
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
		digest, err := protocol.ArgsDigest(args)
		if err != nil {
			return fmt.Errorf("natsjs: announce task %s: %w", t.TaskID, err)
		}
		msg := protocol.Approval{TaskID: t.TaskID, ToolCallID: t.ToolCallID, Tool: t.Tool, Args: args, Metadata: t.Metadata,
			ConversationID: rec.ConversationID, RunID: rec.RunID, RequestedAt: now, ArgsDigest: digest}
		if err := a.publish(ctx, a.subj.Approval(rec.ConversationID, t.TaskID), protocol.ApprovalMsgID(t.TaskID), msg); err != nil {
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
	return a.publish(ctx, a.subj.Approval(conv, r.TaskID), protocol.ResolutionMsgID(r.TaskID), r)
}

func (a *Announcer) publish(ctx context.Context, subject, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("natsjs: marshal %s: %w", subject, err)
	}
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	telemetry.Inject(ctx, m.Header) // the run's trace context, when it is traced (SPEC §14)
	m.Data = data
	if _, err := a.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("natsjs: publish %s: %w", subject, natsjs.CountRefusal(a.metrics, a.names.Approvals, err))
	}
	return nil
}

// Awaits reports whether a live run of conversation conv waits for the
// decision of task (agent --approve wait): its approval is announced and
// not resolved. Such a call is in no stored pending record until the run
// pauses. Best effort: false when the approvals stream cannot be read.
func (a *Announcer) Awaits(ctx context.Context, conv, task string) bool {
	_, ok := a.Announced(ctx, conv, task)
	return ok
}

// Announced returns the open announcement of task in conversation conv:
// announced and not resolved. Best effort: false when the approvals
// stream cannot be read.
func (a *Announcer) Announced(ctx context.Context, conv, task string) (protocol.Approval, bool) {
	s, err := a.js.Stream(ctx, a.names.Approvals)
	if err != nil {
		return protocol.Approval{}, false
	}
	m, err := s.GetLastMsgForSubject(ctx, a.subj.Approval(conv, task))
	if err != nil {
		return protocol.Approval{}, false
	}
	ap, open := announced(m.Data, conv)
	if !open || ap.TaskID != task {
		return protocol.Approval{}, false
	}
	return ap, true
}

// open returns the approvals announced for a live run of conversation
// conv (agent --approve wait) and not resolved since, in the order of
// their task IDs (their time); whether a decision is stored for them is
// [Pending.LiveWaiting]'s question. Best effort: a role that cannot read
// the approvals stream (only admin and approver can) sees none.
func (a *Announcer) open(ctx context.Context, conv string) []protocol.Approval {
	approvals, err := a.js.Stream(ctx, a.names.Approvals)
	if err != nil {
		return nil
	}
	info, err := approvals.Info(ctx, jetstream.WithSubjectFilter(a.subj.ApprovalsFor(conv)))
	if err != nil || len(info.State.Subjects) == 0 {
		return nil
	}
	var out []protocol.Approval
	for _, subject := range slices.Sorted(maps.Keys(info.State.Subjects)) { // task IDs sort by time
		m, err := approvals.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			continue
		}
		ap, open := announced(m.Data, conv)
		if !open || subject != a.subj.Approval(conv, ap.TaskID) {
			continue
		}
		out = append(out, ap)
	}
	return out
}

// Conversations returns the conversations with approvals announced (open
// or resolved) in the approvals stream, sorted: where to look for the
// approvals a live run waits for (see [Announcer.Waiting]). Best effort:
// none when the approvals stream cannot be read.
func (a *Announcer) Conversations(ctx context.Context) []string {
	approvals, err := a.js.Stream(ctx, a.names.Approvals)
	if err != nil {
		return nil
	}
	info, err := approvals.Info(ctx, jetstream.WithSubjectFilter(a.subj.All(protocol.KindApproval)))
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	for subject := range info.State.Subjects {
		if kind, conv, _, _, err := a.subj.Parse(subject); err == nil && kind == protocol.KindApproval {
			seen[conv] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// announced decodes the last message of an approval's subject: an
// announcement of conversation conv not resolved since (open), or a
// resolution.
func announced(data []byte, conv string) (ap protocol.Approval, open bool) {
	var r protocol.Resolution
	if json.Unmarshal(data, &r) == nil && r.Resolved != "" {
		return protocol.Approval{}, false
	}
	ap, err := protocol.DecodeApproval(data, nil)
	return ap, err == nil && ap.ConversationID == conv && ap.Tool != ""
}
