// Package openaicompat implements [llm.Model] for any OpenAI-compatible
// /v1/chat/completions endpoint (OpenAI, Azure, Ollama, vLLM, llama.cpp
// server, Groq, Mistral, DeepSeek, Gemini's OpenAI endpoint, OpenRouter and
// proxies). It is the only package of the module that imports go-openai.
//
// # Requests
//
// Requests are built with go-openai's request types, with the
// normalisations strict servers need: assistant tool calls always carry
// type "function", no index and JSON arguments ("{}" when empty); tool
// results are never empty; tool parameter schemas are never null;
// parallel_tool_calls and tool_choice are sent only with tools, and
// stream_options only on streams with [Config.StreamUsage]. What go-openai's
// types cannot carry is added to the JSON: a tool call's provider fields
// (Gemini's extra_content thought signature), an exact temperature (also
// 0), [Config.ExtraBody]. A response's reasoning_content (DeepSeek) is kept
// as a [message.Thinking] part and sent back with the assistant's tool
// calls.
//
// # Responses
//
// Responses are decoded by the adapter itself (go-openai's stream reader
// cannot tell "[DONE]" from a cut connection, nor carry the fields real
// providers send): arguments as a string or as a JSON object, content as a
// string or a list of parts (text and thinking), reasoning_content or
// reasoning, any number of SSE comments. A stream is complete at "[DONE]"
// (with or without a finish reason) or at the end of the body after a
// finish reason. Streamed tool-call fragments are assembled by the rules
// documented on the accumulator: keyed by id, then index, then arrival,
// with a boundary wherever a call's arguments are a whole JSON value and
// new payload arrives; calls at different indices, or sent whole one after
// the other, are different calls even when they share an id, and each
// entry of a non-streamed message is a call of its own. Every call of a response gets an ID no other call of the
// response or of the request's history has: the provider's, or, when that
// one is taken (Kimi's ids repeat), the provider's with "_2", "_3", …
// appended; the streamed fragments carry it, and the history sends it back
// with the call and its result. Whether a turn is a tool turn is decided by
// the calls received, not by the finish reason.
//
// # Errors and retries
//
// Errors are [*APIError] naming the provider's HTTP status, code and
// message (nothing made up), matched with errors.Is against
// [ErrUnauthorized], [ErrRateLimited] and [ErrQuota]. An in-band error (an
// error object in a chunk or in a 200 body, finish_reason "error") fails
// the request. 429 (except insufficient_quota) and 5xx answers, transport
// errors, and responses cut or silent for [Config.IdleTimeout] before they
// were complete are retried up to [Config.MaxRetries] times with
// exponential backoff, honouring Retry-After; [llm.Request.OnRetry] hears
// of each new attempt, so that consumers drop the void deltas. The API key
// is a [Secret]: it is never logged nor printed.
package openaicompat
