package llm_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
)

func TestSplitWords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"":                        nil,
		"one":                     {"one"},
		"one two":                 {"one ", "two"},
		"a  b\nc ":                {"a  ", "b\n", "c "},
		"  lead":                  {"  lead"},
		`{"k":"v w"}`:             {`{"k":"v `, `w"}`},
		"success (no tool calls)": {"success ", "(no ", "tool ", "calls)"},
	} {
		got := llm.SplitWords(in)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("SplitWords(%q) = %q, want %q", in, got, want)
		}
		if strings.Join(got, "") != in {
			t.Errorf("SplitWords(%q) does not concatenate back", in)
		}
	}
}

func TestDeltas(t *testing.T) {
	t.Parallel()
	parts := []message.Part{
		message.Text{Content: "let me check"},
		message.ToolCall{ToolName: "a", ToolCallID: "1", Args: "{}"},
		message.ToolCall{ToolName: "b", ToolCallID: "2", Args: "{}"},
	}
	ds := llm.Deltas(parts)
	if len(ds) != 5 || ds[0].Text != "let " || ds[2].Text != "check" || ds[3].ToolCall.ToolName != "a" || ds[3].ToolCallIndex != 0 || ds[4].ToolCallIndex != 1 {
		t.Fatalf("deltas = %+v", ds)
	}
}

func TestParseFollowUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   message.UserPrompt
		want llm.FollowUp
		ok   bool
	}{
		{message.UserText("Background tool 'sleep' (task 01J0000000000000000000000A) completed.\nResult: slept\nand more"),
			llm.FollowUp{Tool: "sleep", Task: "01J0000000000000000000000A", Text: "slept\nand more"}, true},
		{message.UserText("Background tool 'sleep' (task 01J0000000000000000000000A) completed.\nResult: "),
			llm.FollowUp{Tool: "sleep", Task: "01J0000000000000000000000A"}, true},
		{message.UserText("Background tool 'crawl' (task T) failed: ToolFailed"),
			llm.FollowUp{Tool: "crawl", Task: "T", Failed: true, Text: "ToolFailed"}, true},
		{message.UserPrompt{Content: []message.Content{message.TextContent("Background tool 'f' (task T) completed.\nResult: see the file"), {Type: "file", Data: []byte("x")}}},
			llm.FollowUp{Tool: "f", Task: "T", Text: "see the file"}, true},
		{message.UserText("Background tool 'sleep' is what I want"), llm.FollowUp{}, false},
		{message.UserText("Please: Background tool 'sleep' (task T) completed.\nResult: x"), llm.FollowUp{}, false},
		{message.UserPrompt{}, llm.FollowUp{}, false},
	} {
		got, ok := llm.ParseFollowUp(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseFollowUp(%+v) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
