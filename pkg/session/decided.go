package session

import (
	"slices"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/protocol"
)

// DecidedBy returns who decided call task of st: the decision recorded on
// its call's return ([DecisionMetaKey]), or stored and not applied yet
// (an arrival); found reports whether task was a call of st at all (an
// answer or a decision stored for it, or settled). The protocol faces
// read so whether a call they would ask was decided elsewhere.
func DecidedBy(st *conversation.State, task string) (by string, found bool) {
	for _, m := range st.History {
		for _, p := range m.Parts {
			tr, ok := p.(message.ToolReturn)
			if !ok {
				continue
			}
			note, ok := tr.Metadata[DecisionMetaKey].(map[string]any)
			if ok && note["task_id"] == task {
				by, _ := note["by"].(string)
				return by, true
			}
		}
	}
	for _, a := range st.Arrivals {
		if a.TaskID != task {
			continue
		}
		if a.Kind == conversation.ArrivalDecision {
			if d, err := protocol.DecodeDecision(a.Data, &protocol.DecodeOpts{MaxSize: -1}); err == nil {
				return d.By, true
			}
		}
		return "", true
	}
	return "", slices.Contains(st.Settled, task)
}
