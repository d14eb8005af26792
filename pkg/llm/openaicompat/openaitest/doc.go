// Package openaitest provides a fake OpenAI-compatible HTTP server for
// black-box tests: [NewServer] wraps any [llm.Model] (a deterministic test
// model, a script) behind POST /v1/chat/completions and GET /v1/models, so
// that the real client path (request encoding, streaming, the tool-call
// accumulator) runs against it.
//
// The server is strict: it answers 400, as OpenAI does, to the requests that
// strict providers reject (tool calls without type "function", arguments
// that are not a JSON string, null parameter schemas, unanswered tool calls,
// tool messages without content, stream_options without stream,
// parallel_tool_calls without tools). Streams follow OpenAI's chunk format:
// a role chunk, text one word per chunk, tool-call arguments in small
// fragments, a finish chunk, a usage chunk when include_usage is set, then
// [DONE].
//
// A thinking part is rendered as reasoning_content and a call's provider
// fields as extra_content, and both are read back from requests.
//
// [Replay] serves scripted raw answers instead (streams, stalls, cut
// connections, error bodies), and [Providers] holds the conformance
// fixtures: the response shapes real providers are reported to send, each
// citing its source.
//
// Start a server in-process and point a client at its URL, e.g. through
// OPENAI_BASE_URL for a binary under test.
package openaitest
