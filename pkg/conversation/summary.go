package conversation

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
)

// The statuses of a [Summary].
const (
	// StatusWaiting: a deferred call (an approval or an external call)
	// waits for a person or a UI.
	StatusWaiting = "waiting"
	// StatusBackground: only background tasks run on; nobody is asked
	// anything.
	StatusBackground = "background"
)

// MaxSummaryPrompt bounds [Summary.Prompt], in bytes: the inbox shows
// what was asked, not a document.
const MaxSummaryPrompt = 4 << 10

// Summary is what people and UIs may read of a conversation that waits
// (SPEC §5.5, the pending bucket): its pending calls and its last user
// prompt, no other history. Its JSON form is stable: `agent pending`,
// `agent approve|deny|answer`, `agent serve` and the approvals inbox read
// it without loading a history.
type Summary struct {
	// ConversationID is the conversation's ULID.
	ConversationID string `json:"conversation_id"`
	// Status is StatusWaiting or StatusBackground.
	Status string `json:"status"`
	// UpdatedAt is when the conversation was last saved.
	UpdatedAt time.Time `json:"updated_at"`
	// Revision is the conversation's stored revision this summary was
	// made from: a summary of an older revision never replaces one of a
	// newer one.
	Revision Revision `json:"revision"`
	// Tasks are the pending tasks with nothing arrived for them yet, as
	// the pending record has them (tool, arguments, kind, deadline).
	Tasks []deferred.PendingTask `json:"tasks"`
	// Prompt is the text of the conversation's last user prompt, cut to
	// MaxSummaryPrompt bytes.
	Prompt string `json:"prompt,omitempty"`
	// Agent is the name of the agent the conversation runs with (State.Agent),
	// empty for one not started by `agent serve`: what a replica's wake
	// checks before it claims the conversation.
	Agent string `json:"agent,omitempty"`
	// Votes are the approvals counted so far for its tasks that need a
	// quorum (State.Votes).
	Votes []Vote `json:"votes,omitempty"`
	// StartedBy is who started the conversation (State.StartedBy).
	StartedBy string `json:"started_by,omitempty"`
}

// Summarize returns the summary of st saved at revision rev, or nil when
// st waits for nothing (no pending task without its arrival).
func Summarize(st *State, rev Revision) *Summary {
	tasks := st.Unresolved()
	if len(tasks) == 0 {
		return nil
	}
	status := StatusBackground
	for _, t := range tasks {
		if !t.Background() {
			status = StatusWaiting
		}
	}
	sum := &Summary{ConversationID: st.ID, Status: status, UpdatedAt: st.UpdatedAt, Revision: rev, Tasks: tasks,
		Prompt: lastPrompt(st.History), StartedBy: st.StartedBy}
	if st.Agent != nil {
		sum.Agent = st.Agent.Name
	}
	for _, t := range tasks {
		sum.Votes = append(sum.Votes, st.VotesFor(t.TaskID)...)
	}
	return sum
}

// State returns the state a decision or an answer given by hand is
// checked against ([State.Admit]): the summary's pending tasks, nothing
// arrived for them, and the approvals counted for them.
func (s *Summary) State() *State {
	return &State{ID: s.ConversationID, Pending: &deferred.PendingRecord{ConversationID: s.ConversationID,
		Tasks: append([]deferred.PendingTask(nil), s.Tasks...)}, UpdatedAt: s.UpdatedAt, Votes: append([]Vote(nil), s.Votes...)}
}

// lastPrompt returns the text of the last user prompt of h, cut to
// MaxSummaryPrompt bytes on a rune boundary.
func lastPrompt(h message.History) string {
	for i := len(h) - 1; i >= 0; i-- {
		for j := len(h[i].Parts) - 1; j >= 0; j-- {
			u, ok := h[i].Parts[j].(message.UserPrompt)
			if !ok {
				continue
			}
			var b strings.Builder
			for _, c := range u.Content {
				if c.Type == "text" {
					if b.Len() > 0 {
						b.WriteByte('\n')
					}
					b.WriteString(c.Text)
				}
			}
			return cut(b.String(), MaxSummaryPrompt)
		}
	}
	return ""
}

// cut returns s cut to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
