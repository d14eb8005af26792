// Package message holds the message history of an agent run: requests sent to
// the model, responses received from it, and the parts they are made of.
//
// # Messages and parts
//
// A [Message] is either a request ([RoleRequest]: system prompt, user prompt,
// tool returns, retry prompts) or a response ([RoleResponse]: text and tool
// calls). Every message carries the run ID, the conversation ID and a
// timestamp; responses also carry the model name and its [Usage].
//
// # Stable JSON
//
// A [History] has a versioned JSON form ([Version]) that is the contract
// between processes: a history marshalled by one process is resumed by
// another. Parts are discriminated by "part_kind"; unknown fields are ignored
// on input, and a document of a newer version is refused with
// [ErrUnsupportedVersion]. Golden files in testdata pin the form.
package message
