package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// resumeDirEnv, when set, makes TestCrossProcessResume play the second
// process: it resumes the run stored in that directory.
const resumeDirEnv = "OFFLOAD_TEST_RESUME_DIR"

// crossProcessAgent is built identically by both processes: two tools that
// need approval, and a model that calls both, then reports what it saw.
func crossProcessAgent(t *testing.T) *agent.Agent {
	t.Helper()
	del := tool.Func("delete_file", "Delete a file.", func(_ context.Context, _ *tool.RunContext, a struct {
		Path string `json:"path"`
	}) (string, error) {
		return "deleted " + a.Path, nil
	}, tool.NeedsApproval())
	double := tool.Func("double", "Double a number.", func(_ context.Context, _ *tool.RunContext, a xArgs) (int, error) {
		return 2 * a.X, nil
	}, tool.NeedsApproval())
	m := model(func(_ int, req *llm.Request) *llm.Response {
		// The model is as stateless as a real one: it decides from the
		// history it is sent.
		last := req.Messages[len(req.Messages)-1]
		if _, ok := last.Parts[len(last.Parts)-1].(message.UserPrompt); ok && len(req.Messages) == 1 {
			return calls(call("delete_file", "c1", `{"path":"/etc/hosts"}`), call("double", "c2", `{"x":1}`))
		}
		// Report every tool return the model was sent, as it saw them, with
		// its recorded outcome.
		var seen []string
		for _, msg := range req.Messages {
			for _, p := range msg.Parts {
				if r, ok := p.(message.ToolReturn); ok {
					seen = append(seen, r.ToolName+"["+string(r.Outcome)+"]="+r.ModelText())
				}
			}
		}
		return text(strings.Join(seen, "; "))
	})
	return newAgentCfg(t, agent.Config{Model: m, AllowDeferred: true}, del, double)
}

// TestCrossProcessResume pauses a run on approvals in this process, stores
// the history and the pending requests as JSON, and resumes in a second
// process (this test binary again) from that JSON with decisions written as
// JSON, as a UI would send them.
func TestCrossProcessResume(t *testing.T) {
	if dir := os.Getenv(resumeDirEnv); dir != "" {
		resumeFromDir(t, dir)
		return
	}
	t.Parallel()
	dir := t.TempDir()
	res, err := crossProcessAgent(t).Run(t.Context(), "clean up and double 1", nil)
	if err != nil || !res.Paused() {
		t.Fatalf("first run: %v %+v", err, res)
	}
	write := func(name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("history.json", res.Messages)
	write("requests.json", res.Deferred)
	// The decisions, in the JSON form a UI or another service would send.
	decisions := `{"approvals": {
		"c1": {"message": "Deleting /etc/hosts is not allowed.", "kind": "tool-denied"},
		"c2": {"override_args": {"x": 21}, "kind": "tool-approved"}
	}, "calls": {}, "metadata": {}}`
	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte(decisions), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrossProcessResume$", "-test.v")
	cmd.Env = append(os.Environ(), resumeDirEnv+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("second process: %v\n%s", err, out)
	}
	var got struct {
		Output         string
		ConversationID string
		RunID          string
	}
	b, err := os.ReadFile(filepath.Join(dir, "output.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := "delete_file[denied]=Deleting /etc/hosts is not allowed.; double[success]=42"
	if got.Output != want {
		t.Errorf("the model saw %q, want %q", got.Output, want)
	}
	if got.ConversationID != res.ConversationID || got.RunID == res.RunID || got.RunID == "" {
		t.Errorf("conversation %s (want %s), run %s (first %s)", got.ConversationID, res.ConversationID, got.RunID, res.RunID)
	}
}

// resumeFromDir is the second process.
func resumeFromDir(t *testing.T, dir string) {
	read := func(name string, v any) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var h message.History
	var reqs deferred.Requests
	var results deferred.Results
	read("history.json", &h)
	read("requests.json", &reqs)
	read("results.json", &results)
	if len(reqs.Approvals) != 2 || reqs.TaskIDs["c1"] == "" {
		t.Fatalf("requests = %+v", reqs)
	}
	res, err := crossProcessAgent(t).Run(context.Background(), "", &agent.RunOptions{History: h, DeferredResults: &results})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"Output": res.Output, "ConversationID": res.ConversationID, "RunID": res.RunID})
	if err := os.WriteFile(filepath.Join(dir, "output.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
