package convstore

import (
	"context"
	"fmt"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Digest returns the args_digest (SPEC §12, binding) of task as it is
// pending in conversation conv: that of its arguments in s, the
// conversation's pending record (nil when it has none), else that of the
// open announcement a live run waits on (agent --approve wait). An error
// wraps conversation.ErrNotFound when the task is in neither.
func (p *Pending) Digest(ctx context.Context, conv string, s *conversation.Summary, task string) (string, error) {
	if s != nil {
		for _, t := range s.Tasks {
			if t.TaskID == task {
				return protocol.ArgsDigest(t.Args)
			}
		}
	}
	if ap, ok := p.Announcer.Announced(ctx, conv, task); ok {
		if ap.ArgsDigest != "" {
			return ap.ArgsDigest, nil
		}
		return protocol.ArgsDigest(ap.Args)
	}
	return "", fmt.Errorf("%w: task %s is not pending in conversation %s", conversation.ErrNotFound, task, conv)
}
