package session

import "github.com/offload-dev/offload/pkg/conversation"

// Summary returns what the conversation waits for as this session last
// saved it (its pending record's summary, nil when it waits for
// nothing) and how far it read the streams: what the lease holder
// checks for arrivals past its reads once it let go of the
// conversation.
func (s *Session) Summary() (*conversation.Summary, conversation.Checkpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return conversation.Summarize(s.st, s.rev), s.st.Checkpoint
}
