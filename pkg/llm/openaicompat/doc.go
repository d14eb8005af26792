// Package openaicompat implements [llm.Model] for any OpenAI-compatible
// /v1/chat/completions endpoint (OpenAI, Azure, Ollama, vLLM, llama.cpp
// server) through github.com/sashabaranov/go-openai. It is the only package
// of the module that imports go-openai.
//
// # Requests
//
// The message history is converted to chat messages with the
// normalisations strict servers need: assistant tool calls always carry
// type "function", no index and JSON arguments ("{}" when empty); tool
// results are never empty; tool parameter schemas are never null;
// parallel_tool_calls and tool_choice are sent only with tools, and
// stream_options only on streams.
//
// # Streaming
//
// Streamed tool-call fragments are accumulated by index, tolerating the
// quirks of real providers: a missing index, every call at index 0, whole
// calls in one chunk, interleaved indices. A stream that ends without a
// finish reason is reported as [llm.ErrIncomplete]. Whether a turn is a tool
// turn is decided by the calls received, not by the finish reason.
//
// # Errors and retries
//
// HTTP errors are returned as [*APIError], matched with errors.Is against
// [ErrUnauthorized] (401, 403) and [ErrRateLimited] (429). Rate limits, 5xx
// answers and transport errors are retried a bounded number of times with
// exponential backoff, honouring Retry-After. The API key is a [Secret]: it
// is never logged nor printed.
package openaicompat
