package script_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// whenYAML has a turn for each condition, one with two, and counted turns.
const whenYAML = `
name: reactive
turns:
  - text: counted one
  - when: {result: {tool: deploy}, follow_up: {tool: build}}
    text: built and deployed
  - when: {follow_up: {contains: "failed: "}}
    text: a task failed
  - when: {follow_up: {tool: build}}
    text: built
  - when: {result: {tool: deploy, contains: denied}}
    text: deploy was denied
  - when: {result: {tool: deploy}}
    text: deployed
  - when: {retry: {tool: deploy}}
    tool_calls: [{tool: deploy, args: {target: prod}}]
  - when: {prompt: {contains: ship}}
    tool_calls:
      - {tool: build}
      - {tool: deploy, id: d1}
  - text: counted two
`

// brings is a request whose history has responses earlier responses, then
// a request with parts.
func brings(responses int, parts ...message.Part) *llm.Request {
	h := []message.Message{message.NewRequest(message.UserText("ship it"))}
	for range responses {
		h = append(h, message.NewResponse(message.Text{Content: "…"}), message.NewRequest(message.UserText("more")))
	}
	h[len(h)-1] = message.NewRequest(parts...)
	if responses == 0 {
		h = []message.Message{message.NewRequest(parts...)}
	}
	return &llm.Request{Messages: h}
}

func followUp(toolName, rest string) message.UserPrompt {
	return message.UserText("Background tool '" + toolName + "' (task 01J0000000000000000000000A) " + rest)
}

func result(toolName, content string) message.ToolReturn {
	c, _ := json.Marshal(content)
	return message.ToolReturn{ToolName: toolName, ToolCallID: "c", Content: c}
}

func answer(t *testing.T, m *script.Model, r *llm.Request) *llm.Response {
	t.Helper()
	resp, err := m.Generate(t.Context(), r)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return resp
}

// A turn with when answers every request that brings what it names (the
// first such turn in the script's order); the others go to the turns
// without when, by count, until they run out.
func TestWhenChoosesByWhatTheRequestBrings(t *testing.T) {
	t.Parallel()
	m, err := script.Parse([]byte(whenYAML), "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 9 || m.Remaining() != 2 {
		t.Fatalf("len %d remaining %d", m.Len(), m.Remaining())
	}
	done := "completed.\nResult: ok"
	for _, tc := range []struct {
		name string
		req  *llm.Request
		want string
	}{
		{"prompt", brings(0, message.SystemPrompt{Content: "be brief"}, message.UserText("please ship it")), "call:build:call_8_1_1 call:deploy:d1"},
		{"prompt again, later in the conversation", brings(2, message.UserText("ship it again")), "call:build:call_8_1_3 call:deploy:d1"},
		{"result", brings(1, result("deploy", "done")), "deployed"},
		{"result containing", brings(1, result("deploy", "access denied")), "deploy was denied"},
		{"failed result", brings(1, message.ToolReturn{ToolName: "deploy", Content: json.RawMessage(`"boom"`), Outcome: message.OutcomeFailed}), "deployed"},
		{"retry", brings(1, message.RetryPrompt{ToolName: "deploy", Content: "target is required"}), "call:deploy:call_7_1_2"},
		{"follow-up", brings(1, followUp("build", done)), "built"},
		{"failed follow-up", brings(1, followUp("build", "failed: disk full")), "a task failed"},
		{"both conditions", brings(1, result("deploy", "done"), followUp("build", done)), "built and deployed"},
		{"a follow-up is not a prompt", brings(1, followUp("lint", done)), "counted one"},
		{"nothing matches", brings(1, result("lint", "ok")), "counted two"},
		{"the same result again", brings(3, result("deploy", "done")), "deployed"},
	} {
		resp := answer(t, m, tc.req)
		var got []string
		for _, p := range resp.Parts {
			switch p := p.(type) {
			case message.Text:
				got = append(got, p.Content)
			case message.ToolCall:
				got = append(got, "call:"+p.ToolName+":"+p.ToolCallID)
			}
		}
		if strings.Join(got, " ") != tc.want || resp.ModelName != "reactive" {
			t.Errorf("%s: %q (model %q), want %q", tc.name, got, resp.ModelName, tc.want)
		}
	}
	if m.Remaining() != 0 {
		t.Errorf("remaining %d", m.Remaining())
	}
	_, err = m.Generate(t.Context(), brings(1, result("lint", "ok")))
	want := `script "reactive": request 13: llm: script exhausted (no turn's when matches it, and the 2 turns without when are used up)`
	if !errors.Is(err, llm.ErrScriptExhausted) || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	// A when turn still answers.
	if got := answer(t, m, brings(1, result("deploy", "ok"))).Parts; !reflect.DeepEqual(got, []message.Part{message.Text{Content: "deployed"}}) {
		t.Fatalf("after exhaustion: %+v", got)
	}
}

func TestWhenOnlyScriptExhausted(t *testing.T) {
	t.Parallel()
	m := script.FromTurns("w", []script.Turn{{When: &script.When{Prompt: &script.PromptMatch{}}, Text: "hi"}})
	if got := answer(t, m, brings(0, message.UserText("hello"))); got.Parts[0] != (message.Text{Content: "hi"}) {
		t.Fatalf("prompt: %+v", got)
	}
	_, err := m.Generate(t.Context(), brings(1, result("x", "y")))
	if !errors.Is(err, llm.ErrScriptExhausted) || !strings.HasSuffix(err.Error(), "(no turn's when matches it, and the script has no turn without when)") {
		t.Fatalf("err = %v", err)
	}
	// An invalid when fails the first request that gets to it.
	m = script.FromTurns("w", []script.Turn{{When: &script.When{}, Text: "never"}, {Text: "counted"}})
	_, err = m.Generate(t.Context(), brings(0, message.UserText("hello")))
	if !errors.Is(err, script.ErrInvalidScript) || err.Error() != `script "w": invalid script: turn 1: when needs prompt, result, retry or follow_up` {
		t.Fatalf("err = %v", err)
	}
}

func TestWhenParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, data, want string }{
		{"empty when", "turns:\n  - text: a\n  - when: {}\n    text: b\n", "turn 2 (line 3): when needs prompt, result, retry or follow_up"},
		{"null condition", "turns:\n  - when: {prompt: }\n    text: b\n", "turn 1 (line 2): when needs prompt, result, retry or follow_up"},
		{"unknown condition", "turns:\n  - when: {answer: {tool: a}}\n    text: b\n", "line 2: field answer not found"},
		{"tool in prompt", "turns:\n  - when: {prompt: {tool: a}}\n    text: b\n", "line 2: field tool not found"},
		{"string condition", "turns:\n  - when: {prompt: ship}\n    text: b\n", "line 2: cannot unmarshal !!str `ship`"},
		{"bad tool name", "turns:\n  - when: {follow_up: {tool: not ok}}\n    text: b\n", `turn 1 (line 2): when: follow_up: tool: invalid name: "not ok"`},
		{"when alone", "turns:\n  - when: {prompt: {}}\n", "turn 1 (line 2): a turn needs text, tool_calls or error"},
		{"json unknown key", `{"turns":[{"when":{"result":{"name":"a"}},"text":"b"}]}`, `turn 1 (line 1): json: unknown field "name"`},
	} {
		_, err := script.Parse([]byte(tc.data), "")
		if !errors.Is(err, script.ErrInvalidScript) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant one containing %q", tc.name, err, tc.want)
		}
		if strings.Contains(tc.name, "tool name") && !errors.Is(err, tool.ErrInvalidName) {
			t.Errorf("%s: %v does not wrap tool.ErrInvalidName", tc.name, err)
		}
	}
}
