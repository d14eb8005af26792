package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
)

// runInProcess runs the agent command line in this process against a
// model server at baseURL, and returns its exit code and output.
func runInProcess(t *testing.T, baseURL string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	vars := map[string]string{"OPENAI_BASE_URL": baseURL, "OPENAI_API_KEY": "sk-e2e"}
	e := env{getenv: func(k string) string { return vars[k] }, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code := execute(ctx, args, e)
	return code, stdout.String(), stderr.String()
}

// jsonLines parses --json output.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("stdout line is not JSON: %q", sc.Text())
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 || evs[len(evs)-1]["type"] != "final" {
		t.Fatalf("no final line: %s", out)
	}
	return evs
}

// TestAgentRunProviderConformance runs `agent run` end to end against each
// provider fixture on a loopback server: the calls the agent ran, the
// model_request_retry events (after which a consumer drops the deltas it
// had), the request sent back, the exit code and the error text.
func TestAgentRunProviderConformance(t *testing.T) {
	t.Parallel()
	for _, fx := range openaitest.Providers() {
		t.Run(fx.Name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.NewReplay(append(fx.Replies, fx.FollowUp("Done."))...)
			defer srv.Close()
			args := []string{"run", "--local", "--json", "--model", "openai:m", "--tools", "sleep,list_dir", "--root", t.TempDir()}
			if fx.Idle {
				args = append(args, "--model-idle-timeout", "200ms")
			}
			if !fx.Stream {
				args = append(args, "--stream=false")
			}
			code, stdout, stderr := runInProcess(t, srv.URL(), append(args, "go")...)
			evs := jsonLines(t, stdout)
			final := evs[len(evs)-1]
			first := string(srv.Requests()[0].Body)
			if strings.Contains(first, "stream_options") || !strings.Contains(first, fmt.Sprintf(`"stream":%v`, fx.Stream)) {
				t.Errorf("first request (stream_options only with stream_usage; --stream=%v): %s", fx.Stream, first)
			}
			if len(fx.Err) > 0 {
				if code != exitFailed || final["status"] != "failed" {
					t.Fatalf("exit %d, final %v; an in-band or provider error must fail the run\nstderr: %s", code, final, stderr)
				}
				for _, s := range fx.Err {
					if !strings.Contains(final["error"].(string), s) || !strings.Contains(stderr, s) {
						t.Errorf("error %q (stderr %q) does not say %q", final["error"], stderr, s)
					}
				}
				return
			}
			if code != exitOK {
				t.Fatalf("exit %d, final %v\nstderr: %s", code, final, stderr)
			}
			var calls []string
			var retries int
			var output strings.Builder
			for _, ev := range evs {
				switch ev["type"] {
				case "tool_call":
					calls = append(calls, ev["tool"].(string))
					if ev["args_valid"] != true {
						t.Errorf("tool_call %v: arguments invalid", ev)
					}
				case "tool_result":
					if ev["outcome"] != "success" {
						t.Errorf("tool_result %v", ev)
					}
				case "model_request_retry":
					retries++
					if ev["attempt"] != float64(2) || ev["reason"] == "" {
						t.Errorf("retry event %v", ev)
					}
					output.Reset() // the deltas of the failed attempt are void
				case "model_request_started":
					output.Reset()
				case "text_delta":
					output.WriteString(ev["delta"].(string))
				}
			}
			var want []string
			for _, c := range fx.Calls {
				want = append(want, c.Name)
			}
			if strings.Join(calls, ",") != strings.Join(want, ",") {
				t.Errorf("calls run %v, want %v", calls, want)
			}
			if retries != fx.Retries {
				t.Errorf("%d model_request_retry events, want %d", retries, fx.Retries)
			}
			if fx.Retries > 0 && !strings.Contains(stderr, "openaicompat: retrying request") {
				t.Errorf("stderr does not log the retry: %s", stderr)
			}
			wantOut := fx.Text
			if len(fx.Calls) > 0 {
				wantOut = "Done."
			}
			if final["output"] != wantOut || (fx.Stream && output.String() != wantOut) {
				t.Errorf("output %q, deltas %q, want %q", final["output"], output.String(), wantOut)
			}
			if len(fx.Calls) == 0 {
				return
			}
			reqs := srv.Requests()
			fx.CheckSentBack(t, reqs[len(reqs)-1].Body)
		})
	}
}

func streamReply(text string) openaitest.Reply {
	return openaitest.Providers()[0].FollowUp(text) // a streamed answer
}

// TestStalledStreamFailsWithinIdleTimeout: with no retries, a silent
// stream fails the run after the idle timeout (never hangs), exit 1.
func TestStalledStreamFailsWithinIdleTimeout(t *testing.T) {
	t.Parallel()
	srv := openaitest.NewReplay(openaitest.Reply{Stream: true, Stall: true, Body: openaitest.SSE(`{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`)})
	defer srv.Close()
	// Never hangs: runInProcess bounds the run (30 s), and the final
	// error names the idle timeout as what ended it.
	code, stdout, _ := runInProcess(t, srv.URL(), "run", "--local", "--json", "--model", "openai:m", "--model-idle-timeout", "100ms", "--model-retries", "0", "go")
	final := jsonLines(t, stdout)
	if code != exitFailed || !strings.Contains(final[len(final)-1]["error"].(string), "silent for 100ms (idle timeout)") {
		t.Errorf("exit %d, final %v", code, final[len(final)-1])
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests with --model-retries 0", n)
	}
}

func writeSpec(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSpecModelSettings: --spec's model, instructions, limits, tools and
// model_settings reach the request; a flag given on the command line wins.
func TestSpecModelSettings(t *testing.T) {
	t.Parallel()
	spec := writeSpec(t, `
model: openai:spec-model
instructions: Answer in one word.
limits: {requests: 3, tool_calls: 2, tokens: 1000}
tools: [sleep]
approve: none
capabilities:
  - BackgroundTools: {tools: {background: true}}
  - BackgroundTools: {tools: [sleep]}
external_tools:
  - name: ask_human
    description: Ask a person.
    parameters: {type: object, properties: {question: {type: string}}, required: [question]}
    metadata: {kind: human}
model_settings:
  stream: true
  stream_usage: true
  temperature: 0
  max_tokens: 100
  parallel_tool_calls: false
  idle_timeout: 5s
  retries: 1
  extra_body: {thinking: {type: enabled}}
`)
	srv := openaitest.NewReplay(streamReply("Yes."), openaitest.Fixture{}.FollowUp("Yes.")) // then a JSON answer
	defer srv.Close()
	code, stdout, stderr := runInProcess(t, srv.URL(), "run", "--local", "--spec", spec, "go")
	if code != exitOK || strings.TrimSpace(stdout) != "Yes." {
		t.Fatalf("exit %d stdout %q stderr %s", code, stdout, stderr)
	}
	if strings.Contains(stderr, "not applied yet") {
		t.Errorf("every section is applied: %s", stderr)
	}
	var body map[string]any
	if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	// The external tool is offered with its schema (no worker serves it).
	if !strings.Contains(string(srv.Requests()[0].Body), `"name":"ask_human"`) {
		t.Errorf("external tool ask_human not offered: %s", srv.Requests()[0].Body)
	}
	want := map[string]any{
		"model": "spec-model", "stream": true, "temperature": 0.0, "max_completion_tokens": 100.0,
		"parallel_tool_calls": false,
	}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("%s = %v, want %v", k, body[k], v)
		}
	}
	if so, _ := body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options = %v", body["stream_options"])
	}
	if th, _ := body["thinking"].(map[string]any); th["type"] != "enabled" {
		t.Errorf("extra_body not sent: %v", body["thinking"])
	}
	msgs := body["messages"].([]any)
	// The spec's instructions, then those of its BackgroundTools capabilities.
	if sys := msgs[0].(map[string]any); sys["role"] != "system" || sys["content"] != "Answer in one word.\n\n"+background.Instructions {
		t.Errorf("instructions: %v", msgs[0])
	}
	if tools := body["tools"].([]any); len(tools) != 2 { // sleep and the external ask_human
		t.Errorf("tools offered: %v", tools)
	}

	// A flag wins over the spec.
	code, _, stderr = runInProcess(t, srv.URL(), "run", "--local", "--spec", spec, "--stream=false", "--model", "openai:flag-model", "go")
	if code != exitOK {
		t.Errorf("exit %d: %s", code, stderr)
	}
	body = nil
	if err := json.Unmarshal(srv.Requests()[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body["stream"] != false || body["model"] != "flag-model" || body["stream_options"] != nil {
		t.Errorf("flags did not win: stream %v model %v stream_options %v", body["stream"], body["model"], body["stream_options"])
	}
}

// TestSpecStrict: unknown keys and bad values are usage errors (exit 2)
// naming what is wrong.
func TestSpecStrict(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, want string }{
		{"unknown top-level key", "model: test\nmodle_settings: {}\n", "field modle_settings not found"}, //nolint:misspell // the misspelt key is the case
		{"unknown model setting", "model_settings: {stream: true, temprature: 0.2}\n", "field temprature not found"},
		{"unknown limit", "limits: {request: 3}\n", "field request not found"},
		{"bad idle timeout", "model_settings: {idle_timeout: soon}\n", `model_settings.idle_timeout: "soon" is not a duration`},
		{"bad approve", "approve: maybe\n", `approve: "maybe" is not one of`},
		{"bad selector", "capabilities: [{BackgroundTools: {tools: some}}]\n", `"some": use {metadata-key: value}, a list of names, or all`},
		{"unknown capability", "capabilities: [{Foreground: {}}]\n", "field Foreground not found"},
		{"bad external tool", "external_tools: [{name: 'no spaces'}]\n", "external_tools:"},
		{"two documents", "model: test\n---\nmodel: test\n", "more than one YAML document"},
		{"wrong type", "tools: sleep\n", "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runInProcess(t, "http://127.0.0.1:1/v1", "run", "--local", "--spec", writeSpec(t, tt.yaml), "go")
			if code != exitUsage || !strings.Contains(stderr, "--spec ") || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 saying %q", code, stderr, tt.want)
			}
		})
	}
	code, _, stderr := runInProcess(t, "", "run", "--local", "--spec", "/nonexistent/agent.yaml", "go")
	if code != exitUsage || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing spec: exit %d, %q", code, stderr)
	}
	code, _, stderr = runInProcess(t, "", "run", "--local", "--model-retries", "-1", "go")
	if code != exitUsage || !strings.Contains(stderr, "--model-retries must not be negative") {
		t.Errorf("negative retries: exit %d, %q", code, stderr)
	}
}
