package testmodel

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

var (
	weatherDef = llm.ToolDef{
		Name:       "get_weather",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["city","days"]}`),
	}
	timeDef = llm.ToolDef{
		Name:       "get_time",
		Parameters: json.RawMessage(`{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}`),
	}
	pingDef = llm.ToolDef{Name: "ping"}
	allDefs = []llm.ToolDef{weatherDef, timeDef, pingDef}
)

func userRequest(s string) message.Message { return message.NewRequest(message.UserText(s)) }

func ret(name, id, content string) message.ToolReturn {
	return message.ToolReturn{ToolName: name, ToolCallID: id, Content: json.RawMessage(content)}
}

// turn asks m for a response to history and appends the response to it.
func turn(t *testing.T, m *Model, history []message.Message, tools []llm.ToolDef, settings llm.Settings) ([]message.Message, *llm.Response) {
	t.Helper()
	resp, err := m.Generate(t.Context(), &llm.Request{Messages: history, Tools: tools, Settings: settings})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return append(history, message.NewResponse(resp.Parts...)), resp
}

func calls(resp *llm.Response) []message.ToolCall {
	var out []message.ToolCall
	for _, p := range resp.Parts {
		if c, ok := p.(message.ToolCall); ok {
			out = append(out, c)
		}
	}
	return out
}

func text(resp *llm.Response) string { return message.NewResponse(resp.Parts...).Text() }

func TestFirstTurnCallsAllToolsInOfferedOrder(t *testing.T) {
	t.Parallel()
	m := New(Config{})
	_, resp := turn(t, m, []message.Message{userRequest("weather?")}, allDefs, llm.Settings{})
	want := []message.ToolCall{
		{ToolName: "get_weather", ToolCallID: "call_0001", Args: `{"city":"a","days":1}`},
		{ToolName: "get_time", ToolCallID: "call_0002", Args: `{"tz":"UTC"}`},
		{ToolName: "ping", ToolCallID: "call_0003", Args: `{}`},
	}
	if got := calls(resp); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls = %+v\nwant %+v", got, want)
	}
	if len(resp.Parts) != 3 || resp.FinishReason != FinishToolCalls || resp.ModelName != "test" {
		t.Fatalf("response = %+v", resp)
	}
}

func TestSeedChangesArgs(t *testing.T) {
	t.Parallel()
	m := New(Config{Seed: 1})
	_, resp := turn(t, m, []message.Message{userRequest("hi")}, []llm.ToolDef{weatherDef, timeDef}, llm.Settings{})
	got := calls(resp)
	if got[0].Args != `{"city":"b","days":2}` || got[1].Args != `{"tz":"CET"}` {
		t.Fatalf("calls = %+v", got)
	}
}

func TestFinalSummaryJSON(t *testing.T) {
	t.Parallel()
	m := New(Config{})
	h, resp := turn(t, m, []message.Message{userRequest("weather?")}, allDefs, llm.Settings{})
	cs := calls(resp)
	h = append(h, message.NewRequest(
		ret("get_weather", cs[0].ToolCallID, `"sunny"`),
		ret("get_time", cs[1].ToolCallID, `{"hour": 12}`),
		message.ToolReturn{ToolName: "ping", ToolCallID: cs[2].ToolCallID, Content: json.RawMessage(`"boom"`), Outcome: message.OutcomeFailed},
	))
	_, resp = turn(t, m, h, allDefs, llm.Settings{})
	want := `{"get_weather":"sunny","get_time":{"hour":12},"ping":{"error":"boom"}}`
	if got := text(resp); got != want {
		t.Fatalf("text = %s, want %s", got, want)
	}
	if resp.FinishReason != FinishStop || len(calls(resp)) != 0 {
		t.Fatalf("response = %+v", resp)
	}
}

func TestSummaryOnlyCoversCurrentRun(t *testing.T) {
	t.Parallel()
	m := New(Config{CallTools: []string{"get_weather"}})
	h := []message.Message{userRequest("run 1")}
	h, resp := turn(t, m, h, allDefs, llm.Settings{})
	h = append(h, message.NewRequest(ret("get_weather", calls(resp)[0].ToolCallID, `"rain"`)))
	h, resp = turn(t, m, h, allDefs, llm.Settings{})
	if got := text(resp); got != `{"get_weather":"rain"}` {
		t.Fatalf("run 1 text = %s", got)
	}
	// A new user prompt starts a new run: tools are called again, with IDs
	// continuing from the history.
	h = append(h, userRequest("run 2"))
	h, resp = turn(t, m, h, allDefs, llm.Settings{})
	cs := calls(resp)
	if len(cs) != 1 || cs[0].ToolCallID != "call_0002" {
		t.Fatalf("run 2 calls = %+v", cs)
	}
	h = append(h, message.NewRequest(ret("get_weather", cs[0].ToolCallID, `"snow"`)))
	_, resp = turn(t, m, h, allDefs, llm.Settings{})
	if got := text(resp); got != `{"get_weather":"snow"}` {
		t.Fatalf("run 2 text = %s", got)
	}
}

func TestNoToolCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		tools []llm.ToolDef
		want  string
	}{
		{name: "no tools offered", want: NoToolCallsText},
		{name: "empty CallTools", cfg: Config{CallTools: []string{}}, tools: allDefs, want: NoToolCallsText},
		{name: "CallTools not offered", cfg: Config{CallTools: []string{"nope"}}, tools: allDefs, want: NoToolCallsText},
		{name: "custom text", cfg: Config{CallTools: []string{}, OutputText: "done."}, tools: allDefs, want: "done."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, resp := turn(t, New(tc.cfg), []message.Message{userRequest("hi")}, tc.tools, llm.Settings{})
			if got := text(resp); got != tc.want || len(resp.Parts) != 1 {
				t.Fatalf("response = %+v, want text %q", resp, tc.want)
			}
		})
	}
}

func TestOutputTextAfterTools(t *testing.T) {
	t.Parallel()
	m := New(Config{OutputText: "It is sunny."})
	h, resp := turn(t, m, []message.Message{userRequest("weather?")}, []llm.ToolDef{weatherDef}, llm.Settings{})
	h = append(h, message.NewRequest(ret("get_weather", calls(resp)[0].ToolCallID, `"sunny"`)))
	_, resp = turn(t, m, h, []llm.ToolDef{weatherDef}, llm.Settings{})
	if got := text(resp); got != "It is sunny." {
		t.Fatalf("text = %q", got)
	}
}

func TestRetryRecallsOnlyFailedTools(t *testing.T) {
	t.Parallel()
	m := New(Config{})
	h, resp := turn(t, m, []message.Message{userRequest("go")}, allDefs, llm.Settings{})
	cs := calls(resp)
	h = append(h, message.NewRequest(
		ret("get_weather", cs[0].ToolCallID, `"sunny"`),
		message.RetryPrompt{ToolName: "get_time", ToolCallID: cs[1].ToolCallID, Content: "tz: bad value"},
		ret("ping", cs[2].ToolCallID, `"pong"`),
	))
	h, resp = turn(t, m, h, allDefs, llm.Settings{})
	want := []message.ToolCall{{ToolName: "get_time", ToolCallID: "call_0004", Args: `{"tz":"CET"}`}}
	if got := calls(resp); !reflect.DeepEqual(got, want) {
		t.Fatalf("retry calls = %+v, want %+v", got, want)
	}
	// A second retry advances the seed again.
	h = append(h, message.NewRequest(message.RetryPrompt{ToolName: "get_time", ToolCallID: "call_0004", Content: "still bad"}))
	h, resp = turn(t, m, h, allDefs, llm.Settings{})
	want = []message.ToolCall{{ToolName: "get_time", ToolCallID: "call_0005", Args: `{"tz":"UTC"}`}}
	if got := calls(resp); !reflect.DeepEqual(got, want) {
		t.Fatalf("second retry calls = %+v, want %+v", got, want)
	}
	h = append(h, message.NewRequest(ret("get_time", "call_0005", `"12:00"`)))
	_, resp = turn(t, m, h, allDefs, llm.Settings{})
	if got, want := text(resp), `{"get_weather":"sunny","ping":"pong","get_time":"12:00"}`; got != want {
		t.Fatalf("text = %s, want %s", got, want)
	}
}

func TestRetryOfUnselectedToolIsIgnored(t *testing.T) {
	t.Parallel()
	m := New(Config{CallTools: []string{"ping"}})
	h := []message.Message{
		userRequest("go"),
		message.NewResponse(message.ToolCall{ToolName: "ping", ToolCallID: "x"}),
		message.NewRequest(message.RetryPrompt{Content: "output invalid"}),
	}
	_, resp := turn(t, m, h, allDefs, llm.Settings{})
	if len(calls(resp)) != 0 {
		t.Fatalf("calls = %+v", calls(resp))
	}
}

func TestToolChoice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		choice string
		want   []string
	}{
		{"", []string{"get_weather", "get_time", "ping"}},
		{"auto", []string{"get_weather", "get_time", "ping"}},
		{"required", []string{"get_weather", "get_time", "ping"}},
		{"none", nil},
		{"get_time", []string{"get_time"}},
		{"unknown", nil},
	} {
		t.Run(tc.choice, func(t *testing.T) {
			t.Parallel()
			_, resp := turn(t, New(Config{}), []message.Message{userRequest("go")}, allDefs, llm.Settings{ToolChoice: tc.choice})
			var got []string
			for _, c := range calls(resp) {
				got = append(got, c.ToolName)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("tool_choice %q: called %v, want %v", tc.choice, got, tc.want)
			}
		})
	}
}

func TestParallelFalseOneToolPerTurn(t *testing.T) {
	t.Parallel()
	no := false
	settings := llm.Settings{ParallelToolCalls: &no}
	m := New(Config{})
	h := []message.Message{userRequest("go")}
	var order []string
	for range 10 {
		var resp *llm.Response
		h, resp = turn(t, m, h, allDefs, settings)
		cs := calls(resp)
		if len(cs) == 0 {
			if got, want := text(resp), `{"get_weather":"r","get_time":"e","ping":"g"}`; got != want {
				t.Fatalf("text = %s, want %s", got, want)
			}
			break
		}
		if len(cs) != 1 {
			t.Fatalf("parallel=false but %d calls", len(cs))
		}
		c := cs[0]
		order = append(order, c.ToolName+"/"+c.ToolCallID)
		if c.ToolName == "get_time" && !strings.Contains(strings.Join(order, ","), "retried") {
			// Fail get_time once: the retry comes before the next tool.
			order = append(order, "retried")
			h = append(h, message.NewRequest(message.RetryPrompt{ToolName: c.ToolName, ToolCallID: c.ToolCallID, Content: "bad"}))
			continue
		}
		// Each tool returns the last letter of its name.
		h = append(h, message.NewRequest(ret(c.ToolName, c.ToolCallID, `"`+c.ToolName[len(c.ToolName)-1:]+`"`)))
	}
	want := []string{"get_weather/call_0001", "get_time/call_0002", "retried", "get_time/call_0003", "ping/call_0004"}
	if !reflect.DeepEqual(order, want) {
		t.Fatalf("order = %v, want %v", order, want)
	}
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	h := []message.Message{
		{Role: message.RoleRequest, Parts: []message.Part{message.SystemPrompt{Content: "be brief"}, message.UserText("weather in Paris?")}},
	}
	req := &llm.Request{Messages: h, Tools: allDefs}
	a, err := New(Config{Seed: 3}).Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Seed: 3})
	for range 3 {
		b, err := m.Generate(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("responses differ:\n%+v\n%+v", a, b)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	m := New(Config{})
	req := &llm.Request{Messages: []message.Message{userRequest("go")}, Tools: allDefs}
	want, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got, err := m.Stream(context.Background(), req, func(llm.Delta) {})
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("Stream = %+v, %v", got, err)
			}
			_ = m.LastRequest()
		})
	}
	wg.Wait()
}

func TestStreamConcatenatesToGenerate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{name: "tool calls", cfg: Config{}},
		{name: "text", cfg: Config{CallTools: []string{}, OutputText: "It is  sunny\nin Paris, today. "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := New(tc.cfg)
			req := &llm.Request{Messages: []message.Message{userRequest("go")}, Tools: allDefs}
			gen, err := m.Generate(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			var ds []llm.Delta
			str, err := m.Stream(t.Context(), req, func(d llm.Delta) { ds = append(ds, d) })
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gen, str) {
				t.Fatalf("Stream response %+v != Generate response %+v", str, gen)
			}
			var sb strings.Builder
			var got []message.Part
			for _, d := range ds {
				if d.ToolCall != nil {
					if d.Text != "" || d.ToolCallIndex != len(got) {
						t.Fatalf("bad tool call delta %+v", d)
					}
					got = append(got, *d.ToolCall)
					continue
				}
				if d.Text == "" {
					t.Fatal("empty text delta")
				}
				if strings.TrimRight(d.Text, " \n") != strings.TrimSpace(d.Text) || strings.Count(strings.TrimSpace(d.Text), " ") > 0 {
					t.Fatalf("delta %q is not one word with trailing spaces", d.Text)
				}
				sb.WriteString(d.Text)
			}
			if sb.Len() > 0 {
				got = append(got, message.Text{Content: sb.String()})
			}
			if !reflect.DeepEqual(got, gen.Parts) {
				t.Fatalf("deltas assemble to %+v, want %+v", got, gen.Parts)
			}
		})
	}
}

func TestUsageEstimate(t *testing.T) {
	t.Parallel()
	m := New(Config{CallTools: []string{}, OutputText: "three little words"})
	req := &llm.Request{Messages: []message.Message{
		{Role: message.RoleRequest, Parts: []message.Part{message.SystemPrompt{Content: "be brief"}, message.UserText("what is the weather?")}},
	}}
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage != (message.Usage{InputTokens: 6, OutputTokens: 3}) {
		t.Fatalf("usage = %+v", resp.Usage)
	}
}

func TestLastRequestIsACopy(t *testing.T) {
	t.Parallel()
	m := New(Config{Name: "mine"})
	if m.Name() != "mine" || m.LastRequest() != nil {
		t.Fatal("fresh model")
	}
	temp := 0.5
	req := &llm.Request{Messages: []message.Message{userRequest("go")}, Tools: []llm.ToolDef{weatherDef}, Settings: llm.Settings{Temperature: &temp, ToolChoice: "auto"}}
	if _, err := m.Generate(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	last := m.LastRequest()
	if !reflect.DeepEqual(last, req) {
		t.Fatalf("LastRequest = %+v, want %+v", last, req)
	}
	*last.Settings.Temperature = 1
	last.Messages[0].Parts[0] = message.Text{}
	last.Tools[0].Parameters[0] = 'X'
	if again := m.LastRequest(); !reflect.DeepEqual(again, req) || temp != 0.5 || weatherDef.Parameters[0] != '{' {
		t.Fatal("LastRequest shares memory with the model or the caller")
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	m := New(Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := &llm.Request{Messages: []message.Message{userRequest("go")}}
	if _, err := m.Generate(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate on cancelled ctx = %v", err)
	}
	if _, err := m.Stream(ctx, req, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream on cancelled ctx = %v", err)
	}
	if _, err := m.Generate(t.Context(), nil); err == nil {
		t.Fatal("nil request: want an error")
	}
	bad := &llm.Request{Messages: req.Messages, Tools: []llm.ToolDef{{Name: "bad", Parameters: json.RawMessage(`{`)}}}
	if _, err := m.Generate(t.Context(), bad); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("invalid schema: err = %v", err)
	}
}

// Config.Args fixes a tool's first arguments; Config.Prose makes the final
// text a line per tool.
func TestArgsAndProse(t *testing.T) {
	m := New(Config{Args: map[string]json.RawMessage{"get_weather": json.RawMessage(`{"city":"Paris","days":2}`)}, Prose: true})
	h, resp := turn(t, m, []message.Message{userRequest("go")}, []llm.ToolDef{weatherDef}, llm.Settings{})
	calls := message.Message{Role: message.RoleResponse, Parts: resp.Parts}.ToolCalls()
	if len(calls) != 1 || calls[0].Args != `{"city":"Paris","days":2}` {
		t.Fatalf("calls %+v", calls)
	}
	h = append(h, message.NewRequest(ret("get_weather", calls[0].ToolCallID, `"sunny"`)))
	_, resp = turn(t, m, h, []llm.ToolDef{weatherDef}, llm.Settings{})
	want := "I called 1 tool.\n- get_weather returned sunny"
	if got := resp.Parts[0].(message.Text).Content; got != want {
		t.Fatalf("final text %q, want %q", got, want)
	}
}

// ack is the acknowledgement a background call returns (SPEC §4).
func ack(name, id, task string) message.ToolReturn {
	s, _ := json.Marshal("Tool '" + name + "' is running in the background as task " + task + ". Its result will arrive later as a follow-up message; continue with other work meanwhile.")
	return message.ToolReturn{ToolName: name, ToolCallID: id, Content: s}
}

// done and failed are the follow-ups of a background task (SPEC §4).
func done(name, task, result string) message.UserPrompt {
	return message.UserText("Background tool '" + name + "' (task " + task + ") completed.\nResult: " + result)
}

func failed(name, task, detail string) message.UserPrompt {
	return message.UserText("Background tool '" + name + "' (task " + task + ") failed: " + detail)
}

// A background call's acknowledgement counts as its call and its
// follow-up as its result: the follow-ups do not start a new run, the
// turns in between say what is awaited, and the summary reports the
// results, with inline tools, several tasks, a failure, and a follow-up
// arriving with the acknowledgements.
func TestBackgroundToolsCalledOnce(t *testing.T) {
	t.Parallel()
	m := New(Config{})
	h := []message.Message{userRequest("go")}
	h, resp := turn(t, m, h, allDefs, llm.Settings{})
	cs := calls(resp)
	if len(cs) != 3 {
		t.Fatalf("first turn calls %+v", cs)
	}
	const t1, t2, t3 = "01J0000000000000000000000A", "01J0000000000000000000000B", "01J0000000000000000000000C"
	h = append(h, message.NewRequest(ack("get_weather", cs[0].ToolCallID, t1), ack("get_time", cs[1].ToolCallID, t2), ret("ping", cs[2].ToolCallID, `"pong"`)))
	steps := []struct {
		follow []message.Part
		want   string
	}{
		{nil, "Waiting for 2 background tasks: get_weather (task " + t1 + "), get_time (task " + t2 + ")."},
		{[]message.Part{done("get_time", t2, `{"hour": 12}`)}, "Waiting for 1 background task: get_weather (task " + t1 + ")."},
		{[]message.Part{failed("get_weather", t1, "no <sky> & no sun")}, `{"get_weather":{"error":"no <sky> & no sun"},"get_time":{"hour":12},"ping":"pong"}`},
	}
	for i, s := range steps {
		if s.follow != nil {
			h = append(h, message.NewRequest(s.follow...))
		}
		h, resp = turn(t, m, h, allDefs, llm.Settings{})
		if got := text(resp); len(calls(resp)) != 0 || got != s.want || resp.FinishReason != FinishStop {
			t.Fatalf("step %d: calls %+v text %s, want %s", i, calls(resp), got, s.want)
		}
	}

	// The follow-up may come in the request of the acknowledgement; a
	// result that is not JSON is a string; Prose reports it too.
	m = New(Config{CallTools: []string{"ping"}, Prose: true})
	h, resp = turn(t, m, []message.Message{userRequest("go")}, allDefs, llm.Settings{})
	id := calls(resp)[0].ToolCallID
	h = append(h, message.NewRequest(ack("ping", id, t3), done("ping", t3, "pong\nand more")))
	_, resp = turn(t, m, h, allDefs, llm.Settings{})
	if got, want := text(resp), "I called 1 tool.\n- ping returned pong\nand more"; got != want {
		t.Fatalf("text %q, want %q", got, want)
	}

	// One tool per turn: a follow-up neither starts over nor skips a tool.
	no := false
	one := llm.Settings{ParallelToolCalls: &no}
	m = New(Config{CallTools: []string{"get_weather", "ping"}})
	h, resp = turn(t, m, []message.Message{userRequest("go")}, allDefs, one)
	h = append(h, message.NewRequest(ack("get_weather", calls(resp)[0].ToolCallID, t1)))
	h, resp = turn(t, m, h, allDefs, one)
	if cs := calls(resp); len(cs) != 1 || cs[0].ToolName != "ping" {
		t.Fatalf("second turn calls %+v", cs)
	}
	h = append(h, message.NewRequest(done("get_weather", t1, `"sunny"`), ret("ping", calls(resp)[0].ToolCallID, `"pong"`)))
	_, resp = turn(t, m, h, allDefs, one)
	if got, want := text(resp), `{"get_weather":"sunny","ping":"pong"}`; len(calls(resp)) != 0 || got != want {
		t.Fatalf("calls %+v text %s, want %s", calls(resp), got, want)
	}
}

// A user prompt that only looks like a follow-up in part, or a follow-up
// next to a new prompt, still starts a new run.
func TestNewPromptAfterBackgroundStartsOver(t *testing.T) {
	t.Parallel()
	m := New(Config{CallTools: []string{"ping"}})
	h, resp := turn(t, m, []message.Message{userRequest("go")}, allDefs, llm.Settings{})
	const task = "01J0000000000000000000000A"
	h = append(h, message.NewRequest(ack("ping", calls(resp)[0].ToolCallID, task), done("ping", task, "pong")))
	h, _ = turn(t, m, h, allDefs, llm.Settings{})
	for _, p := range []message.Message{
		userRequest("Background tool 'ping' is what I want again"),
		message.NewRequest(done("ping", task, "late"), message.UserText("and again")),
	} {
		h = append(h, p)
		var resp *llm.Response
		h, resp = turn(t, m, h, allDefs, llm.Settings{})
		if cs := calls(resp); len(cs) != 1 || cs[0].ToolName != "ping" {
			t.Fatalf("after %v: calls %+v", p, cs)
		}
		h = append(h, message.NewRequest(ret("ping", calls(resp)[0].ToolCallID, `"pong"`)))
		h, _ = turn(t, m, h, allDefs, llm.Settings{})
	}
}
