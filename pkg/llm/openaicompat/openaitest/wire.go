package openaitest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

// The wire types are the server's own, independent of the client library,
// so that tests through this server check what the client really sends.

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	Tools               []wireTool      `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Temperature         *float64        `json:"temperature"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	ToolCalls        []wireToolCall  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
}

type wireToolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
	ExtraContent json.RawMessage `json:"extra_content"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// apiError is an OpenAI error answer.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *apiError {
	e := &apiError{status: 400, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error", Code: "invalid_request"}
	if param != "" {
		e.Param = &param
	}
	return e
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// validate mirrors OpenAI's 400s for what strict servers reject, to catch
// client bugs.
func (r *chatRequest) validate() *apiError {
	if r.Model == "" {
		return badRequest("model", "you must provide a model parameter")
	}
	if len(r.Messages) == 0 {
		return badRequest("messages", "messages must be a non-empty array")
	}
	names := map[string]bool{}
	for i, t := range r.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" || t.Function == nil {
			return badRequest(p+".type", "tool type must be \"function\" with a function")
		}
		if !toolNameRE.MatchString(t.Function.Name) {
			return badRequest(p+".function.name", "invalid tool name %q", t.Function.Name)
		}
		if !isObject(t.Function.Parameters) {
			return badRequest(p+".function.parameters", "parameters must be a JSON object, got %s", orMissing(t.Function.Parameters))
		}
		names[t.Function.Name] = true
	}
	if r.StreamOptions != nil && !r.Stream {
		return badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if r.ParallelToolCalls != nil && len(r.Tools) == 0 {
		return badRequest("parallel_tool_calls", "parallel_tool_calls is only allowed when tools are specified")
	}
	if len(r.ToolChoice) > 0 && !bytes.Equal(r.ToolChoice, []byte("null")) {
		if len(r.Tools) == 0 {
			return badRequest("tool_choice", "tool_choice is only allowed when tools are specified")
		}
		if _, err := r.toolChoice(names); err != nil {
			return err
		}
	}
	pending := map[string]bool{}
	for i, m := range r.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		if m.Role != "tool" && len(pending) > 0 {
			return badRequest(p+".role", "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", keys(pending))
		}
		switch m.Role {
		case "system", "developer", "user":
			if !hasContent(m.Content) {
				return badRequest(p+".content", "content is required for role %q", m.Role)
			}
		case "assistant":
			if !hasContent(m.Content) && len(m.ToolCalls) == 0 {
				return badRequest(p+".content", "an assistant message needs content or tool_calls")
			}
			for j, c := range m.ToolCalls {
				cp := fmt.Sprintf("%s.tool_calls[%d]", p, j)
				switch {
				case c.Index != nil:
					return badRequest(cp+".index", "unexpected index in a request tool call")
				case c.ID == "":
					return badRequest(cp+".id", "tool call id is required")
				case pending[c.ID]:
					return badRequest(cp+".id", "duplicate tool call id %q", c.ID)
				case c.Type != "function":
					return badRequest(cp+".type", "tool call type must be \"function\", got %q", c.Type)
				case c.Function.Name == "":
					return badRequest(cp+".function.name", "tool call name is required")
				}
				var args string
				if err := json.Unmarshal(c.Function.Arguments, &args); err != nil {
					return badRequest(cp+".function.arguments", "arguments must be a string, got %s", orMissing(c.Function.Arguments))
				}
				if !json.Valid([]byte(args)) {
					return badRequest(cp+".function.arguments", "arguments must be valid JSON, got %q", args)
				}
				pending[c.ID] = true
			}
		case "tool":
			if !pending[m.ToolCallID] {
				return badRequest(p+".tool_call_id", "tool message answers no pending tool call: %q", m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
			if !hasContent(m.Content) {
				return badRequest(p+".content", "tool message content is required")
			}
		default:
			return badRequest(p+".role", "unknown role %q", m.Role)
		}
	}
	if len(pending) > 0 {
		return badRequest("messages", "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", keys(pending))
	}
	return nil
}

// toolChoice decodes tool_choice into the llm.Settings form.
func (r *chatRequest) toolChoice(names map[string]bool) (string, *apiError) {
	if len(r.ToolChoice) == 0 || bytes.Equal(r.ToolChoice, []byte("null")) {
		return "", nil
	}
	var s string
	if json.Unmarshal(r.ToolChoice, &s) == nil {
		switch s {
		case "none", "auto", "required":
			return s, nil
		}
		return "", badRequest("tool_choice", "invalid tool_choice %q", s)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(r.ToolChoice, &named); err != nil || named.Type != "function" {
		return "", badRequest("tool_choice", "invalid tool_choice %s", r.ToolChoice)
	}
	if names != nil && !names[named.Function.Name] {
		return "", badRequest("tool_choice", "tool_choice names unknown tool %q", named.Function.Name)
	}
	return named.Function.Name, nil
}

// toLLM converts the request back into an llm.Request.
func (r *chatRequest) toLLM() (*llm.Request, error) {
	out := &llm.Request{}
	for _, t := range r.Tools {
		out.Tools = append(out.Tools, llm.ToolDef{
			Name:        t.Function.Name,
			Description: t.Function.Description,
			Parameters:  t.Function.Parameters,
		})
	}
	choice, _ := r.toolChoice(nil)
	out.Settings = llm.Settings{
		Temperature:       r.Temperature,
		MaxTokens:         max(r.MaxTokens, r.MaxCompletionTokens),
		ToolChoice:        choice,
		ParallelToolCalls: r.ParallelToolCalls,
	}
	msgs, err := toHistory(r.Messages)
	if err != nil {
		return nil, err
	}
	out.Messages = msgs
	return out, nil
}

// toHistory converts chat messages into a history: consecutive system,
// user and tool messages form one request, each assistant message one
// response.
func toHistory(in []wireMessage) ([]message.Message, error) {
	var (
		out   []message.Message
		parts []message.Part
		names = map[string]string{} // tool call ID → tool name
	)
	flush := func() {
		if len(parts) > 0 {
			out = append(out, message.NewRequest(parts...))
			parts = nil
		}
	}
	for i, m := range in {
		switch m.Role {
		case "system", "developer":
			text, err := textContent(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			parts = append(parts, message.SystemPrompt{Content: text})
		case "user":
			p, err := userPart(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			parts = append(parts, p)
		case "tool":
			text, err := textContent(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			name := names[m.ToolCallID]
			if body, ok := strings.CutSuffix(text, message.RetrySuffix); ok {
				parts = append(parts, message.RetryPrompt{ToolName: name, ToolCallID: m.ToolCallID, Content: body})
				break
			}
			content, _ := json.Marshal(text)
			parts = append(parts, message.ToolReturn{ToolName: name, ToolCallID: m.ToolCallID, Content: content})
		case "assistant":
			flush()
			var rp []message.Part
			if m.ReasoningContent != "" {
				rp = append(rp, message.Thinking{Content: m.ReasoningContent, Source: "reasoning_content"})
			}
			if text, _ := textContent(m.Content); text != "" {
				rp = append(rp, message.Text{Content: text})
			}
			for _, c := range m.ToolCalls {
				var args string
				_ = json.Unmarshal(c.Function.Arguments, &args)
				names[c.ID] = c.Function.Name
				tc := message.ToolCall{ToolName: c.Function.Name, ToolCallID: c.ID, Args: args}
				var extra bytes.Buffer
				if len(c.ExtraContent) > 0 && json.Compact(&extra, c.ExtraContent) == nil && extra.String() != "null" {
					tc.ProviderExtra = extra.String()
				}
				rp = append(rp, tc)
			}
			out = append(out, message.NewResponse(rp...))
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	flush()
	return out, nil
}

// userPart converts user content; a text ending with the retry suffix is a
// retry prompt without a tool call.
func userPart(raw json.RawMessage) (message.Part, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if body, ok := strings.CutSuffix(s, message.RetrySuffix); ok {
			return message.RetryPrompt{Content: body}, nil
		}
		return message.UserText(s), nil
	}
	var cps []contentPart
	if err := json.Unmarshal(raw, &cps); err != nil {
		return nil, fmt.Errorf("user content must be a string or an array of parts")
	}
	var up message.UserPrompt
	for _, cp := range cps {
		switch {
		case cp.Type == "text":
			up.Content = append(up.Content, message.TextContent(cp.Text))
		case cp.Type == "image_url" && cp.ImageURL != nil:
			up.Content = append(up.Content, imageContent(cp.ImageURL.URL))
		default:
			return nil, fmt.Errorf("unsupported content part type %q", cp.Type)
		}
	}
	return up, nil
}

func imageContent(url string) message.Content {
	rest, ok := strings.CutPrefix(url, "data:")
	if ok {
		meta, data, ok := strings.Cut(rest, ",")
		if mt, ok2 := strings.CutSuffix(meta, ";base64"); ok && ok2 {
			if b, err := base64.StdEncoding.DecodeString(data); err == nil {
				return message.FileContent("", mt, b)
			}
		}
	}
	return message.TextContent(url)
}

// textContent reads content that is a string or an array of text parts.
func textContent(raw json.RawMessage) (string, error) {
	if !hasContent(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var cps []contentPart
	if err := json.Unmarshal(raw, &cps); err != nil {
		return "", fmt.Errorf("content must be a string or an array of text parts")
	}
	var b strings.Builder
	for _, cp := range cps {
		b.WriteString(cp.Text)
	}
	return b.String(), nil
}

func hasContent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

func orMissing(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	return string(raw)
}

func keys(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}
