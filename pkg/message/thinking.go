package message

// Thinking is reasoning the model produced before its answer (DeepSeek's and
// vLLM's reasoning_content, Ollama's reasoning, Magistral's thinking chunks).
// It is kept in the history so that it can be sent back to providers that
// require it (DeepSeek thinking mode with tool calls), and it is never part
// of the output: [Message.Text] leaves it out.
type Thinking struct {
	// Content is the reasoning text, possibly empty when the provider only
	// sent a signature.
	Content string `json:"content"`
	// Signature is the provider's opaque signature of the reasoning, if any,
	// to be sent back verbatim.
	Signature string `json:"signature,omitempty"`
	// ID is the provider's ID of the reasoning item, if any.
	ID string `json:"id,omitempty"`
	// Source names the wire form the reasoning came in, e.g.
	// "reasoning_content", "reasoning" or "content" (a thinking content
	// part), so that an adapter can send it back in the same form.
	Source string `json:"source,omitempty"`
}

// Thinking returns the concatenated thinking parts of the message.
func (m Message) Thinking() string {
	var s string
	for _, p := range m.Parts {
		if t, ok := p.(Thinking); ok {
			s += t.Content
		}
	}
	return s
}
