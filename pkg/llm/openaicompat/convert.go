package openaicompat

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

// EmptyToolResult is sent as the content of a tool result whose text is
// empty: a tool message without content is invalid.
const EmptyToolResult = "(no output)"

// emptySchema is sent for tools without a parameter schema: a null schema is
// invalid.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// encodeRequest converts req into the JSON body of a chat completion
// request: go-openai's request type, then the fields it cannot carry
// (extra_content on tool calls, an exact temperature, extra body fields,
// content on every message for the servers that need it).
func (m *Model) encodeRequest(req *llm.Request, stream bool) ([]byte, error) {
	out := openai.ChatCompletionRequest{Model: m.cfg.Model, Stream: stream}
	msgs, extras, err := convertMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	out.Messages = msgs
	if stream && m.cfg.StreamUsage {
		out.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 || bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
			params = emptySchema
		}
		out.Tools = append(out.Tools, openai.Tool{
			Type: openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{
				Name:        t.Name,
				Description: t.Description,
				Parameters:  params,
			},
		})
	}
	s := req.Settings
	if len(out.Tools) > 0 {
		switch {
		case s.ParallelToolCalls != nil:
			out.ParallelToolCalls = *s.ParallelToolCalls
		case m.cfg.ParallelToolCalls != nil:
			out.ParallelToolCalls = *m.cfg.ParallelToolCalls
		}
		switch s.ToolChoice {
		case "":
		case "auto", "none", "required":
			out.ToolChoice = s.ToolChoice
		default:
			out.ToolChoice = openai.ToolChoice{
				Type:     openai.ToolTypeFunction,
				Function: openai.ToolFunction{Name: s.ToolChoice},
			}
		}
	}
	if s.MaxTokens > 0 {
		if m.cfg.UseMaxTokens {
			//lint:ignore SA1019 the legacy field is what Ollama and llama.cpp read.
			out.MaxTokens = s.MaxTokens //nolint:staticcheck // SA1019: the same reason, for golangci-lint, which reads no lint:ignore
		} else {
			out.MaxCompletionTokens = s.MaxTokens
		}
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("openaicompat: encode request: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("openaicompat: encode request: %w", err)
	}
	if s.Temperature != nil {
		// go-openai drops a zero temperature (omitempty).
		top["temperature"], _ = json.Marshal(*s.Temperature)
	}
	if len(extras) > 0 || m.cfg.AlwaysSendContent {
		if top["messages"], err = patchMessages(top["messages"], extras, m.cfg.AlwaysSendContent); err != nil {
			return nil, fmt.Errorf("openaicompat: encode request: %w", err)
		}
	}
	for k, v := range m.cfg.ExtraBody {
		top[k], _ = json.Marshal(v)
	}
	return json.Marshal(top)
}

// callExtra is a provider field to attach to tool call j of message i.
type callExtra struct {
	msg, call int
	raw       json.RawMessage
}

// patchMessages adds what go-openai's message type cannot carry.
func patchMessages(raw json.RawMessage, extras []callExtra, alwaysContent bool) (json.RawMessage, error) {
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, err
	}
	for _, e := range extras {
		var calls []map[string]json.RawMessage
		if err := json.Unmarshal(msgs[e.msg]["tool_calls"], &calls); err != nil {
			return nil, err
		}
		calls[e.call]["extra_content"] = e.raw
		b, err := json.Marshal(calls)
		if err != nil {
			return nil, err
		}
		msgs[e.msg]["tool_calls"] = b
	}
	if alwaysContent {
		// go-openai omits empty content; DeepSeek and others answer 422.
		for _, m := range msgs {
			if _, ok := m["content"]; !ok {
				m["content"] = json.RawMessage(`""`)
			}
		}
	}
	return json.Marshal(msgs)
}

// convertMessages converts the history into chat messages, and lists the
// provider fields to attach to their tool calls.
func convertMessages(history []message.Message) ([]openai.ChatCompletionMessage, []callExtra, error) {
	out := make([]openai.ChatCompletionMessage, 0, len(history)+1)
	var extras []callExtra
	for i, msg := range history {
		var err error
		switch msg.Role {
		case message.RoleRequest:
			out, err = appendRequest(out, msg)
		case message.RoleResponse:
			out, extras = appendResponse(out, extras, msg)
		default:
			err = fmt.Errorf("unknown role %q", msg.Role)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("openaicompat: message %d: %w", i, err)
		}
	}
	return out, extras, nil
}

// appendRequest adds the chat messages of a request: system prompts first,
// then tool results, then user content, so that tool messages directly
// follow the assistant message that called the tools.
func appendRequest(out []openai.ChatCompletionMessage, msg message.Message) ([]openai.ChatCompletionMessage, error) {
	var tools, users []openai.ChatCompletionMessage
	for _, p := range msg.Parts {
		switch p := p.(type) {
		case message.SystemPrompt:
			out = append(out, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: p.Content})
		case message.UserPrompt:
			um, err := userMessage(p)
			if err != nil {
				return nil, err
			}
			users = append(users, um)
		case message.ToolReturn:
			tools = append(tools, toolMessage(p.ToolCallID, p.ModelText()))
		case message.RetryPrompt:
			if p.ToolCallID != "" {
				tools = append(tools, toolMessage(p.ToolCallID, p.ModelText()))
			} else {
				users = append(users, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: p.ModelText()})
			}
		default:
			return nil, fmt.Errorf("unexpected %s part in a request", p.PartKind())
		}
	}
	out = append(out, tools...)
	return append(out, users...), nil
}

func toolMessage(id, text string) openai.ChatCompletionMessage {
	if strings.TrimSpace(text) == "" {
		text = EmptyToolResult
	}
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: id, Content: text}
}

// userMessage converts a user prompt: plain content for a single text item,
// parts otherwise (images as data URLs).
func userMessage(p message.UserPrompt) (openai.ChatCompletionMessage, error) {
	um := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser}
	if len(p.Content) == 1 && p.Content[0].Type == "text" {
		um.Content = p.Content[0].Text
		return um, nil
	}
	for _, c := range p.Content {
		switch c.Type {
		case "text":
			um.MultiContent = append(um.MultiContent, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: c.Text})
		case "file":
			um.MultiContent = append(um.MultiContent, filePart(c))
		default:
			return um, fmt.Errorf("unsupported user content type %q", c.Type)
		}
	}
	if len(um.MultiContent) == 0 {
		um.MultiContent = nil
	}
	return um, nil
}

// filePart renders a file: text files inline, anything else as a data URL
// (chat completions only know image parts).
func filePart(c message.Content) openai.ChatMessagePart {
	mt := c.MediaType
	if mt == "" {
		mt = "application/octet-stream"
	}
	if isTextMedia(mt) {
		text := string(c.Data)
		if c.Name != "" {
			text = c.Name + ":\n" + text
		}
		return openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: text}
	}
	url := "data:" + mt + ";base64," + base64.StdEncoding.EncodeToString(c.Data)
	return openai.ChatMessagePart{
		Type:     openai.ChatMessagePartTypeImageURL,
		ImageURL: &openai.ChatMessageImageURL{URL: url},
	}
}

func isTextMedia(mt string) bool {
	mt, _, _ = strings.Cut(mt, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || strings.HasSuffix(mt, "+json") ||
		mt == "application/xml" || strings.HasSuffix(mt, "+xml") || mt == "application/yaml"
}

// appendResponse adds the assistant message of a response: its text and
// its tool calls, normalised, with their provider fields; and, on a message
// with tool calls, the reasoning the provider sent as reasoning_content
// (DeepSeek's thinking mode answers 400 without it). Other thinking stays
// in the history only. An empty response is left out.
func appendResponse(out []openai.ChatCompletionMessage, extras []callExtra, msg message.Message) ([]openai.ChatCompletionMessage, []callExtra) {
	am := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Text()}
	for _, c := range msg.ToolCalls() {
		if c.ProviderExtra != "" && json.Valid([]byte(c.ProviderExtra)) {
			extras = append(extras, callExtra{msg: len(out), call: len(am.ToolCalls), raw: json.RawMessage(c.ProviderExtra)})
		}
		am.ToolCalls = append(am.ToolCalls, openai.ToolCall{
			ID:   c.ToolCallID,
			Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{
				Name:      c.ToolName,
				Arguments: string(c.ArgsJSON()),
			},
		})
	}
	if len(am.ToolCalls) > 0 {
		for _, p := range msg.Parts {
			if t, ok := p.(message.Thinking); ok && t.Source == "reasoning_content" {
				am.ReasoningContent += t.Content
			}
		}
	}
	if am.Content == "" && len(am.ToolCalls) == 0 {
		return out, extras
	}
	return append(out, am), extras
}

func toolCallPart(id, name, args string) message.ToolCall {
	if id == "" {
		id = newCallID()
	}
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	return message.ToolCall{ToolName: name, ToolCallID: id, Args: args}
}

// newCallID makes an ID for a call the provider sent without one (some
// local servers do), so that its result can be matched.
func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}
