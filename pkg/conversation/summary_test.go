package conversation_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
)

// A summary holds the unresolved tasks and the last user prompt's text,
// cut on a rune boundary; none when nothing is waited for; its State
// admits what resolves its tasks.
func TestSummarize(t *testing.T) {
	t.Parallel()
	st := &conversation.State{ID: "01J00000000000000000000000", Pending: &deferred.PendingRecord{Tasks: []deferred.PendingTask{
		{TaskID: "01J00000000000000000000001", Kind: deferred.KindApproval, Tool: "shell"},
		{TaskID: "01J00000000000000000000002", Kind: deferred.KindBackground, Tool: "sleep"},
	}}}
	long := "a" + strings.Repeat("é", conversation.MaxSummaryPrompt) // two bytes each, from an odd offset
	st.History = message.History{
		message.NewRequest(message.UserText("first")),
		message.NewResponse(message.Text{Content: "ok"}),
		message.NewRequest(message.UserText(long)),
	}
	s := conversation.Summarize(st, 7)
	if s == nil || s.Status != conversation.StatusWaiting || s.Revision != 7 || len(s.Tasks) != 2 {
		t.Fatalf("summary %+v", s)
	}
	if len(s.Prompt) > conversation.MaxSummaryPrompt || !utf8.ValidString(s.Prompt) || !strings.HasPrefix(long, s.Prompt) || len(s.Prompt) < conversation.MaxSummaryPrompt-1 {
		t.Errorf("prompt of %d bytes, valid %v", len(s.Prompt), utf8.ValidString(s.Prompt))
	}
	if err := s.State().Admit(conversation.ArrivalDecision, st.Pending.Tasks[0].TaskID, []byte(`{"approved":true}`), 0, st.UpdatedAt, 0); err != nil {
		t.Errorf("decision for the summary's approval: %v", err)
	}
	// The approval decided: only the background task is left.
	if err := st.Admit(conversation.ArrivalDecision, st.Pending.Tasks[0].TaskID, []byte(`{"approved":true}`), 1, st.UpdatedAt, 0); err != nil {
		t.Fatal(err)
	}
	if s := conversation.Summarize(st, 8); s == nil || s.Status != conversation.StatusBackground || len(s.Tasks) != 1 {
		t.Fatalf("summary once decided %+v", s)
	}
	st.Pending = nil
	if s := conversation.Summarize(st, 9); s != nil {
		t.Errorf("summary of a conversation waiting for nothing: %+v", s)
	}
}
