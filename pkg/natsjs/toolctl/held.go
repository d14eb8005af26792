package toolctl

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/pending"
)

var _ pending.Queue = (*Control)(nil)

// Held returns every call waiting in a tool's queue, held by a limit
// (SPEC §19), as the tools' states hold them now: what the pending list
// and the inbox show as queued (pending.Desk.Queued). It reads the
// limits bucket, as [Control.List] does.
func (c *Control) Held(ctx context.Context) ([]pending.Queued, error) {
	if err := c.ensure(ctx); err != nil {
		return nil, err
	}
	lim, err := c.js.KeyValue(ctx, c.names.LimitsBucket)
	if err != nil {
		return nil, fmt.Errorf("toolctl: the limits bucket: %w", err)
	}
	now := time.Now()
	var out []pending.Queued
	err = eachKey(ctx, lim, func(key string, value []byte) {
		name, ok := strings.CutSuffix(key, ".state")
		if !ok {
			return
		}
		var st limits.State
		if json.Unmarshal(value, &st) != nil {
			return
		}
		for _, e := range st.Held(now) {
			out = append(out, pending.Queued{ConversationID: e.Conversation, TaskID: e.Task, Attempt: e.Attempt, Tool: name,
				Agent: e.Agent, Tenant: e.Tenant, Kind: pending.KindQueued, Reason: e.Reason, Since: e.Since, NotBefore: e.NotBefore})
		}
	})
	return out, err
}
