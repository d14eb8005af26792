package tool

// The metadata of an external call whose answer is the tool's input rather
// than its result (an MCP server's elicitation, SPEC §16): a tool defers
// the call ([CallDeferred]) with {"offload.answer_to":"next_attempt"} in its
// metadata while it keeps its work open; the agent lists the call as a
// pending external call, and an answer to it is not taken as the call's
// result: the call runs again as its task's next attempt with the answer
// in its [RunContext.ToolCallMetadata] under "offload.answer", as
// {"action":"accept","content":…}, {"action":"decline","message":…} (an
// answer of status failed or retry) or {"action":"cancel"}. The result of
// that attempt is the call's.
const (
	// AnswerToMetaKey is the deferral's metadata key "offload.answer_to".
	AnswerToMetaKey = "offload.answer_to"
	// AnswerToNextAttempt is its value: the answer goes to the next attempt.
	AnswerToNextAttempt = "next_attempt"
	// AnswerMetaKey is the key "offload.answer" of the answer in the next
	// attempt's ToolCallMetadata.
	AnswerMetaKey = "offload.answer"
	// AnswerHolderMetaKey is the key "offload.answer_holder" of the ID of
	// the worker that holds the call's open work (an MCP call parked on
	// an elicitation): a worker sets it on a deferral whose answer goes to
	// the next attempt, the agent copies it beside the answer into that
	// attempt's ToolCallMetadata, and a worker of another ID hands the
	// attempt back so that the holder runs it (SPEC §16). It only routes:
	// the holder continues only a call it holds.
	AnswerHolderMetaKey = "offload.answer_holder"
)

// AnswersNextAttempt reports whether a deferral's metadata asks for its
// answer to go to the call's next attempt.
func AnswersNextAttempt(metadata map[string]any) bool {
	v, _ := metadata[AnswerToMetaKey].(string)
	return v == AnswerToNextAttempt
}
