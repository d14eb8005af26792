package openaitest

import (
	"strings"
	"testing"
)

// Fixture is a response shape a real provider is publicly reported (or
// documented) to send, reproduced on loopback for the conformance suite:
// the adapter's tests and `agent run` end to end replay it, check the
// assembled response, the request sent back after the tool calls, and the
// error text.
//
// Tool calls in fixtures name built-in tools (sleep, list_dir) with valid
// arguments, so that an agent can run them.
type Fixture struct {
	// Name identifies the fixture: "provider/shape".
	Name string
	// Provider is the provider (or server) whose shape this is.
	Provider string
	// Shape says in a few words what is peculiar.
	Shape string
	// Source is the public report or documentation the shape comes from.
	Source string
	// Stream is true when the client must stream to get these replies.
	Stream bool
	// Replies answer the first request, retries included.
	Replies []Reply
	// Calls are the tool calls the first response must assemble to.
	Calls []Call
	// Text and Thinking are the text and reasoning it must carry.
	Text, Thinking string
	// Retries is the number of new attempts the client must make.
	Retries int
	// Idle is true when the client needs a short idle timeout (a stall).
	Idle bool
	// Err lists substrings of the error the request must fail with (empty:
	// it must succeed); NotErr lists what the error must not say.
	Err, NotErr []string
	// SentBack lists substrings the follow-up request (history with the
	// response and its tool results) must contain.
	SentBack []string
}

// Call is an expected tool call. ID is checked when non-empty; Args is
// compared as JSON.
type Call struct {
	Name, ID, Args, Extra string
}

// CheckSentBack fails t (without stopping it) when body, the follow-up
// request after the fixture's tool calls, is not one [Server] would accept
// or lacks one of f.SentBack.
func (f Fixture) CheckSentBack(t testing.TB, body []byte) {
	t.Helper()
	if err := ValidateRequest(body); err != nil {
		t.Errorf("request sent back is invalid: %v\n%s", err, body)
	}
	for _, s := range f.SentBack {
		if !strings.Contains(string(body), s) {
			t.Errorf("request sent back lacks %s:\n%s", s, body)
		}
	}
}

// FollowUp returns the reply to the request after the fixture's tool calls:
// a short final answer, streamed when the fixture is.
func (f Fixture) FollowUp(text string) Reply {
	if f.Stream {
		return Reply{Stream: true, Body: SSE(
			envelope(`"choices":[{"index":0,"delta":{"role":"assistant","content":`+jsonString(text)+`},"finish_reason":null}]`),
			envelope(`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`),
			"[DONE]")}
	}
	return Reply{Body: `{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
		jsonString(text) + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`}
}

func jsonString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// envelope wraps the fields of a chat.completion.chunk in its envelope.
func envelope(fields string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764680501,"model":"m",` + fields + `}`
}

// choice is a chunk with one choice holding delta and finish.
func choice(delta, finish string) string {
	return envelope(`"choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}]`)
}

const (
	sleepArgs = `{"seconds":0}`
	listArgs  = `{"path":"."}`
)

func keepAlives(comment string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = comment
	}
	return out
}

// Providers returns the conformance fixtures, one or more per provider
// shape.
func Providers() []Fixture {
	role := choice(`{"role":"assistant","content":""}`, "null")
	return []Fixture{
		{
			Name: "openai/parallel-calls", Provider: "OpenAI", Stream: true,
			Shape:  "two calls, arguments in fragments, usage chunk",
			Source: "https://platform.openai.com/docs/api-reference/chat-streaming (and reference/model.md §2.2, a gpt-4.1-nano capture)",
			Replies: []Reply{{Stream: true, Body: SSE(
				choice(`{"role":"assistant","content":null}`, "null"),
				choice(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"sleep","arguments":""}}]}`, "null"),
				choice(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"seco"}}]}`, "null"),
				choice(`{"tool_calls":[{"index":0,"function":{"arguments":"nds\":0}"}}]}`, "null"),
				choice(`{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"list_dir","arguments":""}}]}`, "null"),
				choice(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"path\":\".\"}"}}]}`, "null"),
				choice(`{}`, `"tool_calls"`),
				envelope(`"choices":[],"usage":{"prompt_tokens":172,"completion_tokens":57,"total_tokens":229}`),
				"[DONE]")}},
			Calls:    []Call{{Name: "sleep", ID: "call_1", Args: sleepArgs}, {Name: "list_dir", ID: "call_2", Args: listArgs}},
			SentBack: []string{`"tool_calls":[{"id":"call_1","type":"function","function":{"name":"sleep","arguments":"{\"seconds\":0}"}}`, `"tool_call_id":"call_2"`},
		},
		{
			Name: "openai/400-code-null", Provider: "OpenAI",
			Shape:   `400 whose error has "code": null`,
			Source:  "https://platform.openai.com/docs/guides/error-codes (invalid_request_error bodies carry \"code\": null)",
			Replies: []Reply{{Status: 400, Body: `{"error":{"message":"Invalid value for 'tool_choice'.","type":"invalid_request_error","param":"tool_choice","code":null}}`}},
			Err:     []string{"status 400: Invalid value for 'tool_choice'."},
			NotErr:  []string{"(0)", "()", "null"},
		},
		{
			Name: "openai/429-insufficient-quota", Provider: "OpenAI",
			Shape:   "429 insufficient_quota: not retried",
			Source:  "https://platform.openai.com/docs/guides/error-codes (429: You exceeded your current quota)",
			Replies: []Reply{{Status: 429, Body: `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`}},
			Err:     []string{"status 429 (insufficient_quota): You exceeded your current quota"},
		},
		{
			Name: "openai/429-retry-after", Provider: "OpenAI",
			Shape:  "429 with retry-after-ms, then an answer",
			Source: "https://platform.openai.com/docs/guides/rate-limits (retry-after headers)",
			Replies: []Reply{
				{Status: 429, Header: map[string]string{"Retry-After-Ms": "20", "Retry-After": "1"}, Body: `{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
				{Stream: true, Body: SSE(role, choice(`{"content":"Hello."}`, "null"), choice(`{}`, `"stop"`), "[DONE]")},
			},
			Stream: true, Text: "Hello.", Retries: 1,
		},
		{
			Name: "openai/stream-cut", Provider: "OpenAI",
			Shape:  "connection cut in the middle of the arguments, then a full stream",
			Source: "https://github.com/Wei-Shaw/sub2api/pull/6298 (streams cut mid-generation by a connection reset); reference/model.md §1.4 (go-openai reads a cut as a clean end)",
			Replies: []Reply{
				{Stream: true, Cut: true, Body: SSE(role, choice(`{"content":"Let me "}`, "null"),
					choice(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"sleep","arguments":"{\"sec"}}]}`, "null"))},
				{Stream: true, Body: SSE(role,
					choice(`{"tool_calls":[{"index":0,"id":"call_9","type":"function","function":{"name":"sleep","arguments":"{\"seconds\":0}"}}]}`, "null"),
					choice(`{}`, `"tool_calls"`), "[DONE]")},
			},
			Stream: true, Retries: 1,
			Calls: []Call{{Name: "sleep", ID: "call_9", Args: sleepArgs}},
		},
		{
			Name: "openai/stream-stall", Provider: "OpenAI",
			Shape:  "stream silent after its first chunk (idle timeout), then a full stream",
			Source: "https://github.com/MoonshotAI/kimi-code/issues/1798 (an OpenAI-compatible stream silent mid-body, hanging forever); https://github.com/QwenLM/qwen-code/pull/5143",
			Replies: []Reply{
				{Stream: true, Stall: true, Body: SSE(role, choice(`{"content":"Thinking"}`, "null"))},
				{Stream: true, Body: SSE(role, choice(`{"content":"Done."}`, "null"), choice(`{}`, `"stop"`), "[DONE]")},
			},
			Stream: true, Idle: true, Retries: 1, Text: "Done.",
		},
		{
			Name: "openrouter/keep-alive", Provider: "OpenRouter",
			Shape:  "200 ': OPENROUTER PROCESSING' comments before the first chunk",
			Source: "https://openrouter.ai/docs/api-reference/streaming; go-openai's limit: https://github.com/sashabaranov/go-openai/issues/70",
			Replies: []Reply{{Stream: true, Body: SSE(append(keepAlives(": OPENROUTER PROCESSING", 200),
				role, choice(`{"content":"Still here."}`, "null"), choice(`{}`, `"stop"`), "[DONE]")...)}},
			Stream: true, Text: "Still here.",
		},
		{
			Name: "openrouter/mid-stream-error", Provider: "OpenRouter",
			Shape:  `error object in a chunk with finish_reason "error"`,
			Source: "https://openrouter.ai/docs/api-reference/streaming (Handling Errors During Streaming)",
			Replies: []Reply{{Stream: true, Body: SSE(role, choice(`{"content":"The answer is"}`, "null"),
				envelope(`"provider":"Example","error":{"code":"server_error","message":"Provider disconnected unexpectedly"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]`),
				"[DONE]")}},
			Stream: true,
			Err:    []string{"status 200, error in the response (server_error): Provider disconnected unexpectedly"},
		},
		{
			Name: "openrouter/error-in-200-body", Provider: "OpenRouter",
			Shape:   "error object in a 200 non-streamed body",
			Source:  "https://openrouter.ai/docs/api/errors (errors after processing started are emitted in the response body)",
			Replies: []Reply{{Body: `{"id":"gen-1","object":"chat.completion","created":1,"model":"m","choices":[],"error":{"code":502,"message":"Provider returned error","metadata":{"provider_name":"Example"}}}`}},
			Err:     []string{"status 200, error in the response (502): Provider returned error"},
		},
		{
			Name: "vllm/done-without-finish-reason", Provider: "vLLM",
			Shape:  "[DONE] after the call with no finish reason",
			Source: "https://github.com/vllm-project/vllm/issues/27572",
			Replies: []Reply{{Stream: true, Body: SSE(role,
				choice(`{"tool_calls":[{"index":0,"id":"chatcmpl-tool-a1","type":"function","function":{"name":"list_dir","arguments":"{\"path\": \".\"}"}}]}`, "null"),
				"[DONE]")}},
			Stream: true,
			Calls:  []Call{{Name: "list_dir", ID: "chatcmpl-tool-a1", Args: listArgs}},
		},
		{
			Name: "vllm/reasoning-content", Provider: "vLLM",
			Shape:  "reasoning_content deltas before the answer",
			Source: "https://docs.vllm.ai/en/latest/features/reasoning_outputs.html",
			Replies: []Reply{{Stream: true, Body: SSE(role,
				choice(`{"reasoning_content":"The user greets. "}`, "null"),
				choice(`{"reasoning_content":"Answer briefly."}`, "null"),
				choice(`{"content":"Hi!"}`, "null"), choice(`{}`, `"stop"`), "[DONE]")}},
			Stream: true, Text: "Hi!", Thinking: "The user greets. Answer briefly.",
		},
		{
			Name: "llamacpp/arguments-object", Provider: "llama.cpp",
			Shape:    "arguments as a JSON object, not a string (non-streamed)",
			Source:   "https://github.com/ggml-org/llama.cpp/issues/20198",
			Replies:  []Reply{{Body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"qwen","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"type":"function","id":"Xy7","function":{"name":"list_dir","arguments":{"path":"."}}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10},"timings":{"predicted_n":5}}`}},
			Calls:    []Call{{Name: "list_dir", ID: "Xy7", Args: listArgs}},
			SentBack: []string{`"arguments":"{\"path\":\".\"}"`},
		},
		{
			Name: "llamacpp/arguments-object-stream", Provider: "llama.cpp",
			Shape:  "streamed call whose arguments are a JSON object",
			Source: "https://github.com/ggml-org/llama.cpp/issues/20198",
			Replies: []Reply{{Stream: true, Body: SSE(role,
				choice(`{"tool_calls":[{"index":0,"id":"Xy8","type":"function","function":{"name":"sleep","arguments":{"seconds":0}}}]}`, "null"),
				choice(`{}`, `"tool_calls"`), "[DONE]")}},
			Stream: true,
			Calls:  []Call{{Name: "sleep", ID: "Xy8", Args: sleepArgs}},
		},
		{
			Name: "magistral/content-parts", Provider: "Mistral (Magistral)",
			Shape:  "delta.content as a list of thinking and text parts",
			Source: "https://github.com/BerriAI/litellm/issues/16272",
			Replies: []Reply{{Stream: true, Body: SSE(
				choice(`{"role":"assistant","content":""}`, "null"),
				choice(`{"content":[{"type":"thinking","thinking":[{"type":"text","text":"It's a greeting"}]}]}`, "null"),
				choice(`{"content":[{"type":"thinking","thinking":[{"type":"text","text":", I should return one."}]}]}`, "null"),
				choice(`{"content":[{"type":"text","text":"Hello"}]}`, "null"),
				choice(`{"content":"!"}`, "null"),
				choice(`{"content":""}`, `"stop"`), "[DONE]")}},
			Stream: true, Text: "Hello!", Thinking: "It's a greeting, I should return one.",
		},
		{
			Name: "mistral/whole-call", Provider: "Mistral",
			Shape:  "each call whole in one chunk, 9-character ids",
			Source: "https://docs.mistral.ai/capabilities/function_calling/",
			Replies: []Reply{{Stream: true, Body: SSE(
				choice(`{"role":"assistant","content":""}`, "null"),
				choice(`{"tool_calls":[{"id":"D681PevKs","function":{"name":"sleep","arguments":"{\"seconds\": 0}"},"index":0}]}`, `"tool_calls"`),
				"[DONE]")}},
			Stream: true,
			Calls:  []Call{{Name: "sleep", ID: "D681PevKs", Args: sleepArgs}},
		},
		{
			Name: "gemini/no-index-signatures", Provider: "Gemini (OpenAI endpoint)",
			Shape:  "calls in separate chunks with neither index nor id, extra_content thought signatures, finish_reason stop",
			Source: "https://github.com/open-webui/computer/issues/224; https://github.com/THU-MAIC/OpenMAIC/issues/1556; https://ai.google.dev/gemini-api/docs/thought-signatures",
			Replies: []Reply{{Stream: true, Body: SSE(
				envelope(`"choices":[{"delta":{"role":"assistant","tool_calls":[{"extra_content":{"google":{"thought_signature":"c2lnLTE="}},"function":{"arguments":"{\"seconds\":0}","name":"sleep"},"type":"function"}]},"index":0}]`),
				envelope(`"choices":[{"delta":{"role":"assistant","tool_calls":[{"function":{"arguments":"{\"path\":\".\"}","name":"list_dir"},"type":"function"}]},"index":0}]`),
				envelope(`"choices":[{"delta":{"role":"assistant"},"finish_reason":"stop","index":0}],"usage":{"completion_tokens":10,"prompt_tokens":50,"total_tokens":60}`),
				"[DONE]")}},
			Stream: true,
			Calls: []Call{
				{Name: "sleep", Args: sleepArgs, Extra: `{"google":{"thought_signature":"c2lnLTE="}}`},
				{Name: "list_dir", Args: listArgs},
			},
			SentBack: []string{`"extra_content":{"google":{"thought_signature":"c2lnLTE="}}`},
		},
		{
			Name: "gemini/signature-only-delta", Provider: "Gemini (OpenAI endpoint)",
			Shape:  "thought signature in a metadata-only delta after the call",
			Source: "https://github.com/open-webui/computer/issues/224",
			Replies: []Reply{{Stream: true, Body: SSE(
				envelope(`"choices":[{"delta":{"role":"assistant","tool_calls":[{"id":"function-call-1","function":{"arguments":"{\"seconds\":0}","name":"sleep"},"type":"function"}]},"index":0}]`),
				envelope(`"choices":[{"delta":{"tool_calls":[{"extra_content":{"google":{"thought_signature":"c2lnLTI="}}}]},"index":0}]`),
				envelope(`"choices":[{"delta":{},"finish_reason":"stop","index":0}]`),
				"[DONE]")}},
			Stream:   true,
			Calls:    []Call{{Name: "sleep", ID: "function-call-1", Args: sleepArgs, Extra: `{"google":{"thought_signature":"c2lnLTI="}}`}},
			SentBack: []string{`{"extra_content":{"google":{"thought_signature":"c2lnLTI="}},"function":{"name":"sleep","arguments":"{\"seconds\":0}"},"id":"function-call-1","type":"function"}`},
		},
		{
			Name: "gemini-proxy/index-zero-no-id", Provider: "Gemini via proxies",
			Shape:  "second call's arguments at index 0 with no id",
			Source: "https://github.com/su-kaka/gcli2api/pull/406; https://github.com/unslothai/unsloth/pull/10059",
			Replies: []Reply{{Stream: true, Body: SSE(role,
				choice(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"sleep","arguments":"{\"seconds\":0}"}}]}`, "null"),
				choice(`{"tool_calls":[{"index":0,"type":"function","function":{"name":"list_dir","arguments":"{\"path\":"}}]}`, "null"),
				choice(`{"tool_calls":[{"index":0,"function":{"arguments":"\".\"}"}}]}`, "null"),
				choice(`{}`, `"tool_calls"`), "[DONE]")}},
			Stream: true,
			Calls:  []Call{{Name: "sleep", ID: "call_a", Args: sleepArgs}, {Name: "list_dir", Args: listArgs}},
		},
		{
			Name: "poolside/id-changes", Provider: "OpenAI-compatible servers (Poolside)",
			Shape:  "a call's id changes after its first chunk",
			Source: "https://github.com/poolsideai/pool/issues/9",
			Replies: []Reply{{Stream: true, Body: SSE(role,
				choice(`{"tool_calls":[{"index":0,"id":"call_first","type":"function","function":{"name":"list_dir","arguments":""}}]}`, "null"),
				choice(`{"tool_calls":[{"index":0,"id":"call_other","type":"function","function":{"arguments":"{\"pa"}}]}`, "null"),
				choice(`{"tool_calls":[{"index":0,"id":"call_third","type":"function","function":{"arguments":"th\":\".\"}"}}]}`, "null"),
				choice(`{}`, `"tool_calls"`), "[DONE]")}},
			Stream: true,
			Calls:  []Call{{Name: "list_dir", ID: "call_first", Args: listArgs}},
		},
		{
			Name: "deepseek/thinking-tool-calls", Provider: "DeepSeek",
			Shape:  "reasoning_content before a tool call, required back with it",
			Source: "https://api-docs.deepseek.com/guides/thinking_mode; https://github.com/anomalyco/opencode/issues/24722",
			Replies: []Reply{{Stream: true, Body: SSE(
				choice(`{"role":"assistant","content":null,"reasoning_content":""}`, "null"),
				choice(`{"content":null,"reasoning_content":"I should nap "}`, "null"),
				choice(`{"content":null,"reasoning_content":"first."}`, "null"),
				choice(`{"content":null,"reasoning_content":null,"tool_calls":[{"index":0,"id":"call_00_ds","type":"function","function":{"name":"sleep","arguments":""}}]}`, "null"),
				choice(`{"content":null,"reasoning_content":null,"tool_calls":[{"index":0,"function":{"arguments":"{\"seconds\":0}"}}]}`, "null"),
				choice(`{"content":null,"reasoning_content":null}`, `"tool_calls"`),
				envelope(`"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":12,"total_tokens":42}`),
				"[DONE]")}},
			Stream: true, Thinking: "I should nap first.",
			Calls:    []Call{{Name: "sleep", ID: "call_00_ds", Args: sleepArgs}},
			SentBack: []string{`"reasoning_content":"I should nap first.","tool_calls":[{"id":"call_00_ds"`},
		},
		{
			Name: "ollama/index-zero-whole-calls", Provider: "Ollama",
			Shape:  "every parallel call whole at index 0, role repeated, reasoning field",
			Source: "https://github.com/ollama/ollama/issues/15457 (via reference/model.md §1.6); https://github.com/huggingface/smolagents/pull/1958",
			Replies: []Reply{{Stream: true, Body: SSE(
				choice(`{"role":"assistant","content":"","reasoning":"Two tools."}`, "null"),
				choice(`{"role":"assistant","content":"","tool_calls":[{"id":"call_x1","index":0,"type":"function","function":{"name":"sleep","arguments":"{\"seconds\":0}"}}]}`, "null"),
				choice(`{"role":"assistant","content":"","tool_calls":[{"id":"call_x2","index":0,"type":"function","function":{"name":"list_dir","arguments":"{\"path\":\".\"}"}}]}`, "null"),
				choice(`{"role":"assistant","content":""}`, `"tool_calls"`), "[DONE]")}},
			Stream: true, Thinking: "Two tools.",
			Calls: []Call{{Name: "sleep", ID: "call_x1", Args: sleepArgs}, {Name: "list_dir", ID: "call_x2", Args: listArgs}},
		},
		{
			Name: "kimi/shared-id-stream", Provider: "Kimi (behind OpenAI-compatible gateways)",
			Shape:  "two calls at indices 0 and 1 share one id, repeated on every fragment",
			Source: "https://github.com/HKUDS/nanobot/issues/4473 (Kimi reuses one short id, e.g. grep:3, for parallel calls); https://github.com/QwenLM/qwen-code/issues/8382",
			Replies: []Reply{{Stream: true, Body: SSE(role,
				choice(`{"tool_calls":[{"index":0,"id":"call:0","type":"function","function":{"name":"sleep","arguments":""}}]}`, "null"),
				choice(`{"tool_calls":[{"index":1,"id":"call:0","type":"function","function":{"name":"list_dir","arguments":"{\"pa"}}]}`, "null"),
				choice(`{"tool_calls":[{"index":0,"id":"call:0","function":{"arguments":"{\"seconds\":0}"}}]}`, "null"),
				choice(`{"tool_calls":[{"index":1,"id":"call:0","function":{"arguments":"th\":\".\"}"}}]}`, "null"),
				choice(`{}`, `"tool_calls"`), "[DONE]")}},
			Stream: true,
			Calls:  []Call{{Name: "sleep", ID: "call:0", Args: sleepArgs}, {Name: "list_dir", ID: "call:0_2", Args: listArgs}},
			SentBack: []string{
				`"tool_calls":[{"id":"call:0","type":"function","function":{"name":"sleep","arguments":"{\"seconds\":0}"}},{"id":"call:0_2","type":"function","function":{"name":"list_dir","arguments":"{\"path\":\".\"}"}}]`,
				`"tool_call_id":"call:0"`, `"tool_call_id":"call:0_2"`,
			},
		},
		{
			Name: "kimi/shared-id", Provider: "Kimi (behind OpenAI-compatible gateways)",
			Shape:    "two calls sharing one id in a non-streamed message",
			Source:   "https://github.com/HKUDS/nanobot/issues/4473; https://github.com/fw-ai/fireconnect/issues/16 (kimi ids are {tool}:{position}, unique per turn at best)",
			Replies:  []Reply{{Body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"kimi-k2","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"","tool_calls":[{"id":"functions.sleep:0","type":"function","function":{"name":"sleep","arguments":"{\"seconds\":0}"}},{"id":"functions.sleep:0","type":"function","function":{"name":"list_dir","arguments":"{\"path\":\".\"}"}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}`}},
			Calls:    []Call{{Name: "sleep", ID: "functions.sleep:0", Args: sleepArgs}, {Name: "list_dir", ID: "functions.sleep:0_2", Args: listArgs}},
			SentBack: []string{`"tool_call_id":"functions.sleep:0"`, `"tool_call_id":"functions.sleep:0_2"`},
		},
		{
			Name: "groq/whole-call-x-groq", Provider: "Groq",
			Shape:  "call whole in one chunk, usage in x_groq",
			Source: "https://console.groq.com/docs/tool-use",
			Replies: []Reply{{Stream: true, Body: SSE(
				choice(`{"role":"assistant","content":null}`, "null"),
				choice(`{"tool_calls":[{"id":"call_gq1","type":"function","function":{"name":"list_dir","arguments":"{\"path\":\".\"}"},"index":0}]}`, "null"),
				envelope(`"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"x_groq":{"id":"req_1","usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`),
				"[DONE]")}},
			Stream: true,
			Calls:  []Call{{Name: "list_dir", ID: "call_gq1", Args: listArgs}},
		},
	}
}
