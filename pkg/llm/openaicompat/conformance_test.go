package openaicompat_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/message"
)

var builtinToolDefs = []llm.ToolDef{
	{Name: "sleep", Parameters: json.RawMessage(`{"type":"object","properties":{"seconds":{"type":"number"}},"required":["seconds"]}`)},
	{Name: "list_dir", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
}

// TestProviderConformance replays every provider fixture through the
// adapter: the assembled calls, text and thinking, the retries, the error
// text, and the request sent back after the tool calls (which must also
// pass the strict validation of openaitest).
func TestProviderConformance(t *testing.T) {
	t.Parallel()
	for _, fx := range openaitest.Providers() {
		t.Run(fx.Name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.NewReplay(append(fx.Replies, fx.FollowUp("Done."))...)
			defer srv.Close()
			m, err := openaicompat.New(openaicompat.Config{
				BaseURL: srv.URL(), Model: "m", APIKey: "sk-conformance",
				InitialBackoff: time.Millisecond, MaxBackoff: 500 * time.Millisecond,
				IdleTimeout: map[bool]time.Duration{true: 100 * time.Millisecond, false: 10 * time.Second}[fx.Idle],
			})
			if err != nil {
				t.Fatal(err)
			}
			history := []message.Message{message.NewRequest(message.UserText("go"))}
			var retries []llm.Retry
			var text, thinking strings.Builder
			req := &llm.Request{Messages: history, Tools: builtinToolDefs, OnRetry: func(r llm.Retry) {
				retries = append(retries, r)
				text.Reset() // the deltas of the failed attempt are void
				thinking.Reset()
			}}
			var resp *llm.Response
			if fx.Stream {
				resp, err = m.Stream(t.Context(), req, func(d llm.Delta) {
					text.WriteString(d.Text)
					thinking.WriteString(d.Thinking)
				})
			} else {
				resp, err = m.Generate(t.Context(), req)
			}
			if n := len(srv.Requests()); n != 1+fx.Retries {
				t.Errorf("%d requests, want %d", n, 1+fx.Retries)
			}
			if len(retries) != fx.Retries {
				t.Errorf("retries = %+v, want %d", retries, fx.Retries)
			}
			if len(fx.Err) > 0 {
				if err == nil {
					t.Fatalf("no error; response %+v", resp)
				}
				for _, s := range fx.Err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				for _, s := range fx.NotErr {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error %q says %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := message.NewResponse(resp.Parts...)
			if got.Text() != fx.Text || got.Thinking() != fx.Thinking {
				t.Errorf("text %q thinking %q, want %q and %q", got.Text(), got.Thinking(), fx.Text, fx.Thinking)
			}
			if fx.Stream && (text.String() != fx.Text || thinking.String() != fx.Thinking) {
				t.Errorf("streamed text %q thinking %q", text.String(), thinking.String())
			}
			checkCalls(t, got.ToolCalls(), fx.Calls)
			if len(fx.Calls) == 0 {
				return
			}

			// The follow-up: the response and a result per call go back.
			history = append(history, got)
			var results []message.Part
			for _, c := range got.ToolCalls() {
				results = append(results, message.ToolReturn{ToolName: c.ToolName, ToolCallID: c.ToolCallID, Content: json.RawMessage(`"ok"`)})
			}
			history = append(history, message.NewRequest(results...))
			req = &llm.Request{Messages: history, Tools: builtinToolDefs}
			if fx.Stream {
				resp, err = m.Stream(t.Context(), req, nil)
			} else {
				resp, err = m.Generate(t.Context(), req)
			}
			if err != nil {
				t.Fatal(err)
			}
			if txt := message.NewResponse(resp.Parts...).Text(); txt != "Done." {
				t.Errorf("follow-up answer %q", txt)
			}
			reqs := srv.Requests()
			fx.CheckSentBack(t, reqs[len(reqs)-1].Body)
		})
	}
}

func checkCalls(t *testing.T, got []message.ToolCall, want []openaitest.Call) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("calls = %+v, want %+v", got, want)
	}
	ids := map[string]bool{}
	for i, w := range want {
		g := got[i]
		var ga, wa any
		if json.Unmarshal([]byte(g.Args), &ga) != nil || json.Unmarshal([]byte(w.Args), &wa) != nil || !reflect.DeepEqual(ga, wa) {
			t.Errorf("call %d args %q, want %q", i, g.Args, w.Args)
		}
		if g.ToolName != w.Name || (w.ID != "" && g.ToolCallID != w.ID) || g.ToolCallID == "" || g.ProviderExtra != w.Extra {
			t.Errorf("call %d = %+v, want %+v", i, g, w)
		}
		if ids[g.ToolCallID] {
			t.Errorf("call %d reuses id %q", i, g.ToolCallID)
		}
		ids[g.ToolCallID] = true
	}
}
