// Scenarios of results and failures delivered as follow-up texts.

package bgtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// Scenario: test_metadata_marked_tool_acks_then_delivers_result_as_follow_up
func acksThenDelivers(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	m, rec := newModel(func(n int, req *llm.Request) *llm.Response {
		switch n {
		case 0:
			return calls(call("slow_research", "c1", "{}"))
		case 1:
			release() // the run is still open while the tool was blocked
			return text("waiting")
		default:
			return text("done")
		}
	})
	a := newAgent(t, h, m, setup{}, gated("slow_research", "researched topic", gate, nil, bg()))
	res, err := a.Run(runCtx(t), "research", nil)
	if err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	if len(reqs) != 3 || res.Output != "done" {
		t.Fatalf("%d requests, output %q", len(reqs), res.Output)
	}
	id := acks(reqs[1])["c1"]
	if id == "" {
		t.Fatalf("no acknowledgement: %v", toolReturns(reqs[1]))
	}
	if fu := followUpTexts(reqs[1]); len(fu) != 0 {
		t.Errorf("follow-up before the tool finished: %q", fu)
	}
	want := fmt.Sprintf("Background tool 'slow_research' (task %s) completed.\nResult: researched topic", id)
	if fu := followUpTexts(reqs[2]); len(fu) != 1 || fu[0] != want {
		t.Errorf("follow-ups = %q, want [%q]", fu, want)
	}
}

// Scenario: test_tool_signalled_errors_have_readable_follow_ups
func signalledErrors(t *testing.T, h Harness) {
	cases := []struct {
		name, want string
		err        error
	}{
		{"retry", "try later", tool.Retry("try later")},
		{"tool-failed", "no access", tool.Fail("no access")},
		{"deferred", "CallDeferred was raised; background tools cannot defer a running task.", &tool.CallDeferred{Metadata: map[string]any{"secret": "s3cr3t"}}},
		{"empty-retry", "ModelRetry", tool.Retry("")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			failing := tool.Func("flaky", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", c.err }, bg())
			m, rec := newModel(untilFollowUps(1, calls(call("flaky", "c1", "{}"))))
			res, err := newAgent(t, h, m, setup{}, failing).Run(runCtx(t), "go", nil)
			if err != nil || res.Output != "done" {
				t.Fatalf("%v output %q", err, res.Output)
			}
			reqs := rec.requests()
			last := reqs[len(reqs)-1]
			id := acks(last)["c1"]
			want := fmt.Sprintf("Background tool 'flaky' (task %s) failed: %s", id, c.want)
			if fu := followUpTexts(last); len(fu) != 1 || fu[0] != want {
				t.Errorf("follow-ups = %q, want [%q]", fu, want)
			}
			b, _ := json.Marshal(last.Messages)
			if bytes.Contains(b, []byte("s3cr3t")) {
				t.Error("deferral metadata leaked to the model")
			}
		})
	}
}

// Scenario: test_unexpected_error_is_logged_without_exposing_details_to_model
func unexpectedError(t *testing.T, h Harness) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	boom := tool.Func("boom", "", func(context.Context, *tool.RunContext, struct{}) (string, error) {
		return "", errors.New("secret detail")
	}, bg())
	m, rec := newModel(untilFollowUps(1, calls(call("boom", "c1", "{}"))))
	if _, err := newAgent(t, h, m, setup{cfg: agent.Config{Logger: logger}}, boom).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	last := reqs[len(reqs)-1]
	fu := followUpTexts(last)
	if len(fu) != 1 || !strings.HasSuffix(fu[0], ") failed: errorString") {
		t.Errorf("follow-ups = %q", fu)
	}
	b, _ := json.Marshal(last.Messages)
	if bytes.Contains(b, []byte("secret detail")) {
		t.Error("the error's message reached the model")
	}
	if !h.Remote {
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(logs.String(), "secret detail") {
			t.Errorf("the error's message was not logged: %s", logs.String())
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Scenario: test_tool_return_preserves_model_content_without_exposing_metadata
func toolReturnFiles(t *testing.T, h Harness) {
	img := []byte{0x89, 'P', 'N', 'G'}
	rich := tool.Func("rich", "", func(context.Context, *tool.RunContext, struct{}) (*tool.Return, error) {
		return &tool.Return{
			Value:    "public answer",
			Content:  []message.Content{message.TextContent("supporting image"), message.FileContent("chart.png", "image/png", img)},
			Metadata: map[string]any{"private": "app-only"},
		}, nil
	}, bg())
	reqs := runOneCall(t, h, rich)
	last := reqs[len(reqs)-1]
	fu := followUps(last)
	if len(fu) != 1 || len(fu[0].Content) != 3 {
		t.Fatalf("follow-ups = %+v", fu)
	}
	c := fu[0].Content
	if !strings.HasSuffix(c[0].Text, ") completed.\nResult: public answer") || c[1].Text != "supporting image" || c[2].Type != "file" || !bytes.Equal(c[2].Data, img) {
		t.Errorf("content = %+v", c)
	}
	b, _ := json.Marshal(last.Messages)
	if bytes.Contains(b, []byte("app-only")) {
		t.Error("application metadata reached the model")
	}
}

// Scenario: test_tool_return_preserves_string_content
func toolReturnStrings(t *testing.T, h Harness) {
	rich := tool.Func("rich", "", func(context.Context, *tool.RunContext, struct{}) (tool.Return, error) {
		return tool.Return{Value: "public answer", Content: []message.Content{message.TextContent("supporting detail")}}, nil
	}, bg())
	reqs := runOneCall(t, h, rich)
	fu := followUpTexts(reqs[len(reqs)-1])
	if len(fu) != 1 || !strings.HasSuffix(fu[0], "completed.\nResult: public answer\nsupporting detail") {
		t.Errorf("follow-ups = %q", fu)
	}
}

// Scenario: test_structured_return_value_uses_core_model_serialization
func structuredReturn(t *testing.T, h Harness) {
	list := tool.Func("list", "", func(context.Context, *tool.RunContext, struct{}) ([]int, error) { return []int{1, 2}, nil }, bg())
	reqs := runOneCall(t, h, list)
	fu := followUpTexts(reqs[len(reqs)-1])
	if len(fu) != 1 || !strings.HasSuffix(fu[0], "completed.\nResult: [1,2]") {
		t.Errorf("follow-ups = %q", fu)
	}
}

// Scenario: test_instructions_mention_follow_up_delivery
func instructions(t *testing.T, h Harness) {
	m, rec := newModel(func(int, *llm.Request) *llm.Response { return text("hi") })
	if _, err := newAgent(t, h, m, setup{}).Run(runCtx(t), "go", nil); err != nil {
		t.Fatal(err)
	}
	sys, ok := rec.requests()[0].Messages[0].Parts[0].(message.SystemPrompt)
	if !ok || !strings.Contains(sys.Content, background.Instructions) || !strings.Contains(sys.Content, "follow-up message") {
		t.Errorf("system prompt = %+v", rec.requests()[0].Messages[0].Parts[0])
	}
}

// Scenario: test_sync_tool_can_enqueue_from_its_worker_thread
func enqueueFromTask(t *testing.T, h Harness) {
	if h.Remote {
		t.Skip("a remote tool's RunContext is not bound to the agent's run: it cannot Enqueue")
	}
	noter := tool.Func("noter", "", func(_ context.Context, rc *tool.RunContext, _ struct{}) (string, error) {
		return "noted", rc.Enqueue(tool.PriorityASAP, message.TextContent("note from the task"))
	}, bg())
	reqs := runOneCall(t, h, noter)
	found := false
	for _, msg := range reqs[len(reqs)-1].Messages {
		for _, p := range msg.Parts {
			if u, ok := p.(message.UserPrompt); ok && u.Content[0].Text == "note from the task" {
				found = true
			}
		}
	}
	if !found {
		t.Error("the enqueued message never reached the model")
	}
}

// Scenario: test_failed_background_tool_does_not_cancel_its_sibling
func failedKeepsSibling(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	failing := tool.Func("failing", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", tool.Fail("nope") }, bg())
	sibling := gated("sibling", "sibling ok", gate, nil, bg())
	m, rec := newModel(releaseAfter("failing", "sibling", release))
	res, err := newAgent(t, h, m, setup{}, failing, sibling).Run(runCtx(t), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v output %q", err, res.Output)
	}
	reqs := rec.requests()
	last := reqs[len(reqs)-1]
	if !hasFollowUp(last, "Background tool 'failing'") || !strings.HasSuffix(followUpTexts(last)[1], "completed.\nResult: sibling ok") {
		t.Errorf("follow-ups = %q", followUpTexts(last))
	}
}

// Scenario: test_background_base_exception_stops_the_run
// (SPEC §9 decides otherwise for Go: a panicking tool is a Panic outcome
// and the run goes on; the sibling is not cancelled.)
func panicOutcome(t *testing.T, h Harness) {
	gate := make(chan struct{})
	release := closer(gate)
	t.Cleanup(release)
	boom := tool.Func("boom", "", func(context.Context, *tool.RunContext, struct{}) (string, error) { panic("kaboom") }, bg())
	sibling := gated("sibling", "sibling ok", gate, nil, bg())
	m, rec := newModel(releaseAfter("boom", "sibling", release))
	res, err := newAgent(t, h, m, setup{}, boom, sibling).Run(runCtx(t), "go", nil)
	if err != nil || res.Output != "done" {
		t.Fatalf("%v output %q", err, res.Output)
	}
	reqs := rec.requests()
	if fu := followUpTexts(reqs[len(reqs)-1]); len(fu) != 2 || !strings.HasSuffix(fu[0], ") failed: Panic") {
		t.Errorf("follow-ups = %q", fu)
	}
}
