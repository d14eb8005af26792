package testmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

// DefaultName is the name of a [Model] whose Config leaves Name empty.
const DefaultName = "test"

// NoToolCallsText is the final text when the current run returned nothing
// from any tool and Config.OutputText is empty.
const NoToolCallsText = "success (no tool calls)"

// Finish reasons of the responses, as an OpenAI-compatible provider reports
// them.
const (
	FinishStop      = "stop"
	FinishToolCalls = "tool_calls"
)

// Config configures a [Model]. The zero value is useful: it calls every
// offered tool once, then summarises what they returned.
type Config struct {
	// CallTools names the tools the model calls, among those offered.
	// Defaults to (nil) all offered tools; an empty non-nil slice means
	// none. Names that are not offered are ignored.
	CallTools []string
	// OutputText is the final text. Defaults to a JSON object mapping each
	// tool called in the current run to what it returned, or
	// [NoToolCallsText]. (A turn that ends while background tasks of the
	// run have not reported says that it waits for them instead.)
	OutputText string
	// Seed seeds the argument generator (see [GenerateArgs]). Defaults to 0.
	Seed int
	// Name is the model's name. Defaults to [DefaultName].
	Name string
	// Args fixes the arguments of the named tools (a JSON object each),
	// instead of generating them from the schemas.
	Args map[string]json.RawMessage
	// Prose, when OutputText is empty, makes the final text a sentence per
	// tool ("sleep returned {...}.") instead of a JSON object.
	Prose bool
}

// Model is the deterministic test model. Its response is a pure function of
// the request and its Config; see the package documentation for the
// algorithm. It is safe for concurrent use.
type Model struct {
	cfg     Config
	callAll bool
	call    map[string]bool

	mu   sync.Mutex
	last *llm.Request
}

var _ llm.Model = (*Model)(nil)

// New returns a test model configured by cfg.
func New(cfg Config) *Model {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	cfg.Seed = absInt(cfg.Seed)
	m := &Model{cfg: cfg, callAll: cfg.CallTools == nil, call: map[string]bool{}}
	for _, n := range cfg.CallTools {
		m.call[n] = true
	}
	return m
}

// Name returns Config.Name, or [DefaultName].
func (m *Model) Name() string { return m.cfg.Name }

// LastRequest returns a copy of the last request passed to Generate or
// Stream, or nil before the first one.
func (m *Model) LastRequest() *llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		return nil
	}
	return cloneRequest(m.last)
}

// Generate returns the model's deterministic response to req. It returns
// ctx.Err() when ctx is done, and an error when req is nil or a selected
// tool's parameters are not valid JSON.
func (m *Model) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return m.respond(req)
}

// Stream is Generate delivering the response as deltas: text word by word
// (each word keeping its trailing white space), then each tool call whole,
// in one [llm.Delta] carrying its ID, name and complete arguments. The
// returned response is the one Generate returns. onDelta may be nil.
func (m *Model) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp, err := m.respond(req)
	if err != nil {
		return nil, err
	}
	if onDelta != nil {
		for _, d := range llm.Deltas(resp.Parts) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			onDelta(d)
		}
	}
	return resp, nil
}

// plannedCall is a tool to call and the seed of its arguments.
type plannedCall struct {
	def  llm.ToolDef
	seed int
}

func (m *Model) respond(req *llm.Request) (*llm.Response, error) {
	if req == nil {
		return nil, errors.New("testmodel: nil request")
	}
	m.mu.Lock()
	m.last = cloneRequest(req)
	m.mu.Unlock()

	run := currentRun(req.Messages)
	selected := m.selected(req)
	calls := m.plan(req.Messages, run, selected, req.Settings.ParallelToolCalls == nil || *req.Settings.ParallelToolCalls)

	resp := &llm.Response{ModelName: m.cfg.Name}
	if len(calls) > 0 {
		next := countToolCalls(req.Messages) + 1
		for i, c := range calls {
			args, err := m.args(c)
			if err != nil {
				return nil, fmt.Errorf("testmodel: tool %q: %w", c.def.Name, err)
			}
			resp.Parts = append(resp.Parts, message.ToolCall{
				ToolName:   c.def.Name,
				ToolCallID: fmt.Sprintf("call_%04d", next+i),
				Args:       string(args),
			})
		}
		resp.FinishReason = FinishToolCalls
	} else {
		resp.Parts = []message.Part{message.Text{Content: m.finalText(run)}}
		resp.FinishReason = FinishStop
	}
	resp.Usage = message.Usage{
		InputTokens:  historyWords(req.Messages),
		OutputTokens: partsWords(resp.Parts),
	}
	return resp, nil
}

// args returns the arguments of a planned call: Config.Args's for its tool
// on the first try, else generated from its schema.
func (m *Model) args(c plannedCall) (json.RawMessage, error) {
	if a, ok := m.cfg.Args[c.def.Name]; ok && c.seed == m.cfg.Seed {
		return a, nil
	}
	return GenerateArgs(c.def.Parameters, c.seed)
}

// selected returns the offered tools the model may call, in offered order,
// after Config.CallTools and Settings.ToolChoice.
func (m *Model) selected(req *llm.Request) []llm.ToolDef {
	choice := req.Settings.ToolChoice
	if choice == "none" {
		return nil
	}
	var out []llm.ToolDef
	for _, d := range req.Tools {
		if !m.callAll && !m.call[d.Name] {
			continue
		}
		switch choice {
		case "", "auto", "required":
		default:
			if d.Name != choice {
				continue
			}
		}
		out = append(out, d)
	}
	return out
}

// plan decides which tools to call this turn; none means the final text.
func (m *Model) plan(all, run []message.Message, selected []llm.ToolDef, parallel bool) []plannedCall {
	if len(selected) == 0 {
		return nil
	}
	var calls []plannedCall
	switch {
	case !hasResponse(run):
		for _, d := range selected {
			calls = append(calls, plannedCall{def: d, seed: m.cfg.Seed})
		}
	case len(all) > 0 && all[len(all)-1].Role == message.RoleRequest:
		retried := map[string]bool{}
		for _, p := range all[len(all)-1].Parts {
			if r, ok := p.(message.RetryPrompt); ok {
				retried[r.ToolName] = true
			}
		}
		for _, d := range selected {
			if retried[d.Name] {
				calls = append(calls, plannedCall{def: d, seed: m.cfg.Seed + countRetries(run, d.Name)})
			}
		}
	}
	if !parallel && len(calls) == 0 {
		// One tool per turn: the next selected tool the run has not called.
		called := map[string]bool{}
		for _, msg := range run {
			for _, c := range msg.ToolCalls() {
				called[c.ToolName] = true
			}
		}
		for _, d := range selected {
			if !called[d.Name] {
				calls = append(calls, plannedCall{def: d, seed: m.cfg.Seed})
				break
			}
		}
	}
	if !parallel && len(calls) > 1 {
		calls = calls[:1]
	}
	return calls
}

// finalText is the text of a turn without tool calls: the waiting text
// while acknowledged background tasks have not reported; else
// Config.OutputText, or the JSON summary of the tool returns of the run,
// keyed by tool name in order of first return (a later return of the same
// tool replaces the value; a background call's follow-up is its return, its
// acknowledgement only its place), or NoToolCallsText.
func (m *Model) finalText(run []message.Message) string {
	if tasks := waiting(run); len(tasks) > 0 {
		return waitingText(tasks)
	}
	if m.cfg.OutputText != "" {
		return m.cfg.OutputText
	}
	var names []string
	values := map[string]json.RawMessage{}
	set := func(name string, v json.RawMessage) {
		if _, seen := values[name]; !seen {
			names = append(names, name)
		}
		if v != nil || values[name] == nil {
			values[name] = v
		}
	}
	for _, msg := range run {
		if msg.Role != message.RoleRequest {
			continue
		}
		for _, p := range msg.Parts {
			switch p := p.(type) {
			case message.ToolReturn:
				if _, ack := ackTask(p); ack {
					set(p.ToolName, nil)
				} else {
					set(p.ToolName, returnValue(p))
				}
			case message.UserPrompt:
				if f, ok := parseFollowUp(p); ok {
					set(f.tool, f.value)
				}
			}
		}
	}
	if len(names) == 0 {
		return NoToolCallsText
	}
	if m.cfg.Prose {
		return prose(names, values)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(n)
		b.Write(k)
		b.WriteByte(':')
		b.Write(values[n])
	}
	b.WriteByte('}')
	return b.String()
}

// prose is the readable final text: what each tool returned, a sentence
// each.
func prose(names []string, values map[string]json.RawMessage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "I called %d tool", len(names))
	if len(names) != 1 {
		b.WriteByte('s')
	}
	b.WriteString(".")
	for _, n := range names {
		v := values[n]
		var str string
		if json.Unmarshal(v, &str) == nil {
			v = json.RawMessage(str)
		}
		text := string(v)
		if len(text) > 300 {
			text = text[:300] + "…"
		}
		fmt.Fprintf(&b, "\n- %s returned %s", n, text)
	}
	return b.String()
}

// returnValue is the JSON value of a return as the model sees it: the
// content itself (a non-JSON content as a string), {"error":"..."} for a
// failed call.
func returnValue(r message.ToolReturn) json.RawMessage {
	if r.Outcome == message.OutcomeFailed {
		return json.RawMessage(r.ModelText())
	}
	c := bytes.TrimSpace(r.Content)
	if len(c) == 0 {
		return json.RawMessage("null")
	}
	var buf bytes.Buffer
	if json.Compact(&buf, c) == nil {
		return buf.Bytes()
	}
	s, _ := json.Marshal(string(c))
	return s
}

// currentRun returns the messages from the last request holding a user
// prompt other than a background follow-up (the start of the current run)
// to the end; all of them when no request holds one.
func currentRun(msgs []message.Message) []message.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != message.RoleRequest {
			continue
		}
		for _, p := range msgs[i].Parts {
			if _, ok := p.(message.UserPrompt); ok && !isFollowUp(p) {
				return msgs[i:]
			}
		}
	}
	return msgs
}

func hasResponse(msgs []message.Message) bool {
	for _, m := range msgs {
		if m.Role == message.RoleResponse {
			return true
		}
	}
	return false
}

func countToolCalls(msgs []message.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == message.RoleResponse {
			n += len(m.ToolCalls())
		}
	}
	return n
}

func countRetries(msgs []message.Message, tool string) int {
	n := 0
	for _, m := range msgs {
		for _, p := range m.Parts {
			if r, ok := p.(message.RetryPrompt); ok && r.ToolName == tool {
				n++
			}
		}
	}
	return n
}

// words counts words the way the usage estimate does: runs of characters
// other than white space and `",.:`.
func words(s string) int {
	return len(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(`",.:`, r)
	}))
}

func historyWords(msgs []message.Message) int {
	n := 0
	for _, m := range msgs {
		n += partsWords(m.Parts)
	}
	return n
}

func partsWords(parts []message.Part) int {
	n := 0
	for _, p := range parts {
		switch p := p.(type) {
		case message.SystemPrompt:
			n += words(p.Content)
		case message.UserPrompt:
			for _, c := range p.Content {
				n += words(c.Text)
			}
		case message.Text:
			n += words(p.Content)
		case message.ToolCall:
			n += 1 + words(p.Args)
		case message.ToolReturn:
			n += words(p.ModelText())
		case message.RetryPrompt:
			n += words(p.ModelText())
		}
	}
	return n
}

// deltas splits a response into the deltas Stream emits.

func cloneRequest(r *llm.Request) *llm.Request {
	c := &llm.Request{Settings: r.Settings}
	if t := r.Settings.Temperature; t != nil {
		v := *t
		c.Settings.Temperature = &v
	}
	if p := r.Settings.ParallelToolCalls; p != nil {
		v := *p
		c.Settings.ParallelToolCalls = &v
	}
	if r.Messages != nil {
		c.Messages = make([]message.Message, len(r.Messages))
		for i, m := range r.Messages {
			m.Parts = slices.Clone(m.Parts)
			c.Messages[i] = m
		}
	}
	c.Tools = slices.Clone(r.Tools)
	for i := range c.Tools {
		c.Tools[i].Parameters = bytes.Clone(c.Tools[i].Parameters)
	}
	return c
}
