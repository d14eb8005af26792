package script_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

var req = &llm.Request{Messages: []message.Message{message.NewRequest(message.UserText("go"))}}

func generate(t *testing.T, m llm.Model) *llm.Response {
	t.Helper()
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return resp
}

func TestFromTurns(t *testing.T) {
	t.Parallel()
	m := script.FromTurns("", []script.Turn{
		{ToolCalls: []script.Call{
			{Tool: "get_weather", Args: map[string]any{"city": "Paris"}},
			{Tool: "get_time", ID: "mine", Args: `{"tz": "UTC"`},
			{Tool: "ping"},
		}},
		{Text: "Let me check.", ToolCalls: []script.Call{{Tool: "ping", Args: []int{1}}}},
		{Text: "It is sunny."},
	})
	if m.Name() != script.DefaultName || m.Len() != 3 || m.Remaining() != 3 {
		t.Fatalf("name %q, len %d, remaining %d", m.Name(), m.Len(), m.Remaining())
	}
	want := []*llm.Response{
		{ModelName: "script", FinishReason: "tool_calls", Parts: []message.Part{
			message.ToolCall{ToolName: "get_weather", ToolCallID: "call_1_1", Args: `{"city":"Paris"}`},
			message.ToolCall{ToolName: "get_time", ToolCallID: "mine", Args: `{"tz": "UTC"`},
			message.ToolCall{ToolName: "ping", ToolCallID: "call_1_3", Args: `{}`},
		}},
		{ModelName: "script", FinishReason: "tool_calls", Parts: []message.Part{
			message.Text{Content: "Let me check."},
			message.ToolCall{ToolName: "ping", ToolCallID: "call_2_1", Args: `[1]`},
		}},
		{ModelName: "script", FinishReason: "stop", Parts: []message.Part{message.Text{Content: "It is sunny."}}},
	}
	for i, w := range want {
		if got := generate(t, m); !reflect.DeepEqual(got, w) {
			t.Fatalf("turn %d = %+v\nwant %+v", i+1, got, w)
		}
	}
	if m.Remaining() != 0 {
		t.Fatalf("remaining %d", m.Remaining())
	}
}

func TestExhausted(t *testing.T) {
	t.Parallel()
	m := script.FromTurns("weather", []script.Turn{{Text: "one"}, {Text: "two"}})
	generate(t, m)
	generate(t, m)
	for _, n := range []int{3, 4} {
		_, err := m.Stream(t.Context(), req, nil)
		if !errors.Is(err, llm.ErrScriptExhausted) {
			t.Fatalf("request %d: err = %v, want ErrScriptExhausted", n, err)
		}
		want := fmt.Sprintf(`script "weather": request %d: llm: script exhausted (the script has 2 turns)`, n)
		if err.Error() != want {
			t.Fatalf("err = %q\nwant %q", err, want)
		}
	}
}

func TestErrorTurn(t *testing.T) {
	t.Parallel()
	m := script.FromTurns("s", []script.Turn{{Error: "rate limited"}, {Text: "ok"}})
	_, err := m.Generate(t.Context(), req)
	if !errors.Is(err, script.ErrScriptedFailure) || err.Error() != `script "s": turn 1: scripted model failure: rate limited` {
		t.Fatalf("err = %v", err)
	}
	if got := generate(t, m); got.Parts[0] != (message.Text{Content: "ok"}) {
		t.Fatalf("turn 2 = %+v", got)
	}
}

func TestInvalidTurnReportedWhenReached(t *testing.T) {
	t.Parallel()
	m := script.FromTurns("s", []script.Turn{
		{Text: "fine"},
		{ToolCalls: []script.Call{{Tool: "bad name"}}},
		{},
		{Text: "x", Error: "y"},
		{ToolCalls: []script.Call{{Tool: "a", Args: func() {}}}},
	})
	generate(t, m)
	for _, want := range []string{
		`script "s": invalid script: turn 2: tool call 1: tool: invalid name`,
		`script "s": invalid script: turn 3: a turn needs text, tool_calls or error`,
		`script "s": invalid script: turn 4: a turn with an error cannot also have text or tool_calls`,
		`script "s": invalid script: turn 5: tool call 1: args: json: unsupported type: func()`,
	} {
		_, err := m.Generate(t.Context(), req)
		if !errors.Is(err, script.ErrInvalidScript) || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("err = %v\nwant prefix %q", err, want)
		}
	}
	_, err := m.Generate(t.Context(), req)
	if !errors.Is(err, llm.ErrScriptExhausted) {
		t.Fatalf("err = %v", err)
	}
}

func TestCancelledRequestKeepsTurn(t *testing.T) {
	t.Parallel()
	m := script.FromTurns("s", []script.Turn{{Text: "one"}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Generate(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if m.Remaining() != 1 {
		t.Fatal("a cancelled request used a turn")
	}
	generate(t, m)
}

func TestConcurrentTurnsUsedOnce(t *testing.T) {
	t.Parallel()
	const turns, requests = 20, 30
	var ts []script.Turn
	for i := range turns {
		ts = append(ts, script.Turn{Text: fmt.Sprint(i)})
	}
	m := script.FromTurns("s", ts)
	var (
		mu        sync.Mutex
		got       []string
		exhausted int
		wg        sync.WaitGroup
	)
	for i := range requests {
		wg.Go(func() {
			var resp *llm.Response
			var err error
			if i%2 == 0 {
				resp, err = m.Generate(context.Background(), req)
			} else {
				resp, err = m.Stream(context.Background(), req, func(llm.Delta) {})
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, llm.ErrScriptExhausted):
				exhausted++
			case err != nil:
				t.Errorf("unexpected error %v", err)
			default:
				got = append(got, resp.Parts[0].(message.Text).Content)
			}
		})
	}
	wg.Wait()
	sort.Slice(got, func(i, j int) bool { return len(got[i]) < len(got[j]) || len(got[i]) == len(got[j]) && got[i] < got[j] })
	var want []string
	for i := range turns {
		want = append(want, fmt.Sprint(i))
	}
	if !reflect.DeepEqual(got, want) || exhausted != requests-turns {
		t.Fatalf("got %v (exhausted %d), want every turn once and %d exhausted", got, exhausted, requests-turns)
	}
}

func TestStreamDeltas(t *testing.T) {
	t.Parallel()
	m := script.FromTurns("s", []script.Turn{{
		Text:      "It is  sunny\ntoday.",
		ToolCalls: []script.Call{{Tool: "a"}, {Tool: "b", Args: map[string]int{"n": 1}}},
	}})
	var ds []llm.Delta
	resp, err := m.Stream(t.Context(), req, func(d llm.Delta) { ds = append(ds, d) })
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.Delta{
		{Text: "It "}, {Text: "is  "}, {Text: "sunny\n"}, {Text: "today."},
		{ToolCallIndex: 0, ToolCall: &message.ToolCall{ToolName: "a", ToolCallID: "call_1_1", Args: "{}"}},
		{ToolCallIndex: 1, ToolCall: &message.ToolCall{ToolName: "b", ToolCallID: "call_1_2", Args: `{"n":1}`}},
	}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("deltas = %+v\nwant %+v", ds, want)
	}
	if resp.FinishReason != "tool_calls" || len(resp.Parts) != 3 {
		t.Fatalf("resp = %+v", resp)
	}
}

const weatherYAML = `name: weather
turns:
  - tool_calls:
      - tool: get_weather
        args: {city: Paris, days: 3, big: 12345678901234567890}
      - tool: get_time
        args: '{"tz": "Europe/Paris"}'
        id: time-1
  - text: It is sunny in Paris.
  - error: simulate a model failure
`

const weatherJSON = `{"name": "weather", "turns": [
  {"tool_calls": [
    {"tool": "get_weather", "args": {"city": "Paris", "days": 3, "big": 12345678901234567890}},
    {"tool": "get_time", "args": "{\"tz\": \"Europe/Paris\"}", "id": "time-1"}]},
  {"text": "It is sunny in Paris."},
  {"error": "simulate a model failure"}]}
`

func TestParseYAMLAndJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, data, format string }{
		{"yaml", weatherYAML, "yaml"},
		{"yml", weatherYAML, "yml"},
		{"yaml detected", weatherYAML, ""},
		{"json", weatherJSON, "json"},
		{"json detected", weatherJSON, ""},
		{"json as yaml", weatherJSON, "yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := script.Parse([]byte(tc.data), tc.format)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if m.Name() != "weather" || m.Len() != 3 {
				t.Fatalf("name %q len %d", m.Name(), m.Len())
			}
			want := []message.Part{
				message.ToolCall{ToolName: "get_weather", ToolCallID: "call_1_1", Args: `{"big":12345678901234567890,"city":"Paris","days":3}`},
				message.ToolCall{ToolName: "get_time", ToolCallID: "time-1", Args: `{"tz": "Europe/Paris"}`},
			}
			if got := generate(t, m).Parts; !reflect.DeepEqual(got, want) {
				t.Fatalf("turn 1 = %+v\nwant %+v", got, want)
			}
			if got := generate(t, m).Parts; !reflect.DeepEqual(got, []message.Part{message.Text{Content: "It is sunny in Paris."}}) {
				t.Fatalf("turn 2 = %+v", got)
			}
			if _, err := m.Generate(t.Context(), req); !errors.Is(err, script.ErrScriptedFailure) || !strings.HasSuffix(err.Error(), "simulate a model failure") {
				t.Fatalf("turn 3 err = %v", err)
			}
			if _, err := m.Generate(t.Context(), req); !errors.Is(err, llm.ErrScriptExhausted) {
				t.Fatalf("request 4 err = %v", err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, format, data, want string
	}{
		{"empty yaml", "yaml", "", "script: invalid script: empty document"},
		{"no turns yaml", "yaml", "name: x\n", "script: invalid script: no turns"},
		{"no turns json", "json", `{"name":"x","turns":[]}`, "script: invalid script: no turns"},
		{"unknown top key yaml", "yaml", "name: x\nturn:\n  - text: hi\n", "line 2: field turn not found"},
		{"unknown turn key yaml", "yaml", "turns:\n  - text: hi\n  - txt: hi\n", "line 3: field txt not found"},
		{"unknown call key yaml", "yaml", "turns:\n  - tool_calls:\n      - tool: a\n        arguments: {}\n", "line 4: field arguments not found"},
		{"unknown top key json", "json", `{"turns":[{"text":"a"}],"model":"x"}`, `script: invalid script: json: unknown field "model"`},
		{"unknown turn key json", "json", "{\"turns\": [\n {\"text\": \"a\"},\n {\"txt\": \"b\"}]}", `script: invalid script: turn 2 (line 3): json: unknown field "txt"`},
		{"unknown call key json", "json", `{"turns":[{"tool_calls":[{"tool":"a","arguments":{}}]}]}`, `turn 1 (line 1): json: unknown field "arguments"`},
		{"json syntax", "json", "{\"turns\": [\n  {\"text\": \"a\",}]}", "script: invalid script: line 2: invalid character '}'"},
		{"json type", "json", "{\n\"turns\": {}}", "script: invalid script: line 2: json: cannot unmarshal object"},
		{"json trailing", "json", `{"turns":[{"text":"a"}]} {}`, "data after the script object"},
		{"empty turn yaml", "yaml", "turns:\n  - text: a\n  - {}\n", "script: invalid script: turn 2 (line 3): a turn needs text, tool_calls or error"},
		{"empty tool_calls yaml", "yaml", "turns:\n  - tool_calls: []\n", "turn 1 (line 2): a turn needs text, tool_calls or error"},
		{"empty turn json", "json", "{\"turns\":[\n{}]}", "script: invalid script: turn 1 (line 2): a turn needs text, tool_calls or error"},
		{"error and text", "yaml", "turns:\n  - text: a\n    error: b\n", "turn 1 (line 2): a turn with an error cannot also have text or tool_calls"},
		{"bad tool name yaml", "yaml", "turns:\n  - tool_calls:\n      - tool: ok\n      - tool: not ok\n", `turn 1 (line 4): tool call 2: tool: invalid name: "not ok" must match`},
		{"missing tool name json", "json", `{"turns":[{"tool_calls":[{"args":{}}]}]}`, `turn 1 (line 1): tool call 1: tool: invalid name: "" must match`},
		{"duplicate ids", "yaml", "turns:\n  - tool_calls:\n      - {tool: a, id: x}\n      - {tool: b, id: x}\n", `turn 1 (line 4): tool call 2: id "x" already used by tool call 1`},
		{"non-JSON number", "yaml", "turns:\n  - tool_calls:\n      - tool: a\n        args:\n          x: .inf\n", "turn 1 (line 5): tool call 1: args: line 5: .inf is not a JSON number"},
		{"complex key", "yaml", "turns:\n  - tool_calls:\n      - tool: a\n        args: {[1]: x}\n", "invalid map key"},
		{"yaml syntax", "yaml", "turns: [\n", "script: invalid script: yaml: line"},
		{"unknown format", "toml", "turns = []", `unknown format "toml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := script.Parse([]byte(tc.data), tc.format)
			if !errors.Is(err, script.ErrInvalidScript) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v\nwant one containing %q", err, tc.want)
			}
			if strings.Contains(tc.name, "tool name") && !errors.Is(err, tool.ErrInvalidName) {
				t.Fatalf("error %v does not wrap tool.ErrInvalidName", err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	m, err := script.Load(filepath.Join("..", "..", "..", "examples", "scripts", "weather.yaml"))
	if err != nil {
		t.Fatalf("Load example: %v", err)
	}
	if m.Name() != "weather" || m.Len() != 2 {
		t.Fatalf("example: name %q len %d", m.Name(), m.Len())
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "unnamed.json")
	if err := os.WriteFile(path, []byte(`{"turns":[{"text":"hi"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err = script.Load(path)
	if err != nil || m.Name() != "unnamed" {
		t.Fatalf("Load json: %v (name %q)", err, m.Name())
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("turns:\n  - {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = script.Load(bad)
	if !errors.Is(err, script.ErrInvalidScript) || err.Error() != "script: load "+bad+": invalid script: turn 1 (line 2): a turn needs text, tool_calls or error" {
		t.Fatalf("Load bad: %v", err)
	}
	if _, err := script.Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load missing: %v", err)
	}
}

func TestYAMLArgsKeepValues(t *testing.T) {
	t.Parallel()
	data := "turns:\n  - tool_calls:\n      - tool: a\n        args: {d: 2024-01-01, n: 1.50, y: yes, t: true, o: 0o17, big: 123456789012345678901234567890, 1: one, s: [a, ~, 2], m: &m {k: v}, r: *m}\n"
	m, err := script.Parse([]byte(data), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"1":"one","big":123456789012345678901234567890,"d":"2024-01-01","m":{"k":"v"},"n":1.50,"o":15,"r":{"k":"v"},"s":["a",null,2],"t":true,"y":"yes"}`
	if got := generate(t, m).Parts[0].(message.ToolCall).Args; got != want {
		t.Fatalf("args = %s\nwant %s", got, want)
	}
}
