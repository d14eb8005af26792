package convstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// ErrNoSchedules is returned by [Announcer.CanExpire] when the server
// cannot schedule messages (nats-server before 2.12, or an expiries
// stream created without allow_msg_schedules): approval timeouts are not
// written.
var ErrNoSchedules = errors.New("natsjs: the server does not schedule messages (nats-server 2.12 or later, stream allow_msg_schedules)")

// Expire schedules decision d of task in conversation conv (an approval's
// timeout, SPEC §12) as a scheduled message of the expiries stream: at
// when (rounded up to the second), the server writes d, which the
// decisions stream sources onto the task's decision subject (see
// natsjs.ExpirySchedule), whether or not any agent runs then. The first
// decision stored wins, as always: one a person stored before is kept,
// and the timeout's is refused as a duplicate when the conversation
// reads it. A task scheduled already keeps its first schedule (announcing
// a pause again schedules nothing twice).
func (a *Announcer) Expire(ctx context.Context, conv, task string, when time.Time, d protocol.Decision) error {
	return a.expire(ctx, conv, task, when, d, "expiry:"+task, true)
}

// ExpireAgain schedules the timeout decision of task again, after its
// schedule was wiped (a roll-up of the expiries stream; serve's guard):
// as [Announcer.Expire], but in place of whatever the subject holds
// (the roll-up's own message, when it was published there), with a
// Nats-Msg-Id of generation gen (the roll-up's sequence), so that the
// replicas doing it at once store it once, and not refused as the
// original's duplicate.
func (a *Announcer) ExpireAgain(ctx context.Context, conv, task string, when time.Time, d protocol.Decision, gen uint64) error {
	return a.expire(ctx, conv, task, when, d, "expiry:"+task+":"+strconv.FormatUint(gen, 10), false)
}

func (a *Announcer) expire(ctx context.Context, conv, task string, when time.Time, d protocol.Decision, msgID string, onlyNew bool) error {
	data, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("natsjs: the timeout decision of %s: %w", task, err)
	}
	subject := natsjs.ExpirySchedule(a.names.Prefix, conv, task)
	m := nats.NewMsg(subject)
	m.Header.Set("Nats-Schedule", "@at "+when.UTC().Add(time.Second-time.Nanosecond).Truncate(time.Second).Format(time.RFC3339))
	m.Header.Set("Nats-Schedule-Target", natsjs.ExpiryTarget(a.names.Prefix, conv, task))
	m.Data = data
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(msgID)}
	if onlyNew {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(0))
	}
	_, err = a.js.PublishMsg(ctx, m, opts...)
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil &&
		(je.APIError().ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || je.APIError().ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return nil // scheduled already
	}
	if err != nil {
		return fmt.Errorf("natsjs: schedule %s: %w", subject, natsjs.CountRefusal(a.metrics, a.names.Expiries, err))
	}
	return nil
}

// CanExpire reports whether the server schedules the timeouts of
// [Announcer.Expire]: ErrNoSchedules when the expiries stream does not
// allow message schedules (a server before 2.12 ignores the setting).
func (a *Announcer) CanExpire(ctx context.Context) error {
	s, err := a.js.Stream(ctx, a.names.Expiries)
	if err != nil {
		return fmt.Errorf("natsjs: stream %s: %w", a.names.Expiries, err)
	}
	if !s.CachedInfo().Config.AllowMsgSchedules {
		return ErrNoSchedules
	}
	return nil
}
