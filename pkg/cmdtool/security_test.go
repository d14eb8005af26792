package cmdtool_test

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/cmdtool"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestEnvironmentIsMinimal checks SPEC §6.5: a command sees PATH, HOME,
// LANG, TZ, the names under env: and the task's identity, never the
// process's secrets.
func TestEnvironmentIsMinimal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script(t, dir, "env.sh", "env")
	cfg, err := cmdtool.Parse([]byte("tools:\n  - {name: env, command: [./env.sh], env: [RESEARCH_API_KEY]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": "/home/x", "LANG": "C.UTF-8", "TZ": "UTC",
		"RESEARCH_API_KEY": "r-key", "OPENAI_API_KEY": "sk-secret", "NATS_URL": "nats://u:p@h:4222",
		"NATS_CREDS": "/secret.creds", "NATS_NKEY": "/secret.nk", "NATS_PASSWORD": "p",
		"OFFLOAD_ADMIN_PASSWORD": "adm",
	}
	tools, err := cfg.Tools(cmdtool.Options{Dir: dir, Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tools[0].Run(t.Context(), &tool.RunContext{TaskID: "01TASK", ConversationID: "01CONV", Attempt: 2, IdempotencyKey: "01TASK:2"}, json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(out.(string), "\n") {
		name, _, _ := strings.Cut(l, "=")
		if name == "PWD" || name == "SHLVL" || name == "_" { // set by sh itself
			continue
		}
		got = append(got, l)
	}
	slices.Sort(got)
	want := []string{"HOME=/home/x", "LANG=C.UTF-8", "OFFLOAD_ATTEMPT=2", "OFFLOAD_CONVERSATION_ID=01CONV",
		"OFFLOAD_IDEMPOTENCY_KEY=01TASK:2", "OFFLOAD_TASK_ID=01TASK", "PATH=" + vars["PATH"], "RESEARCH_API_KEY=r-key", "TZ=UTC"}
	if !slices.Equal(got, want) {
		t.Errorf("environment\n got  %q\n want %q", got, want)
	}
}

// TestBackgroundChildKilledAtEnd checks that a command's background child
// does not outlive its task, also when it detached with nohup and when it
// keeps stdout open.
func TestBackgroundChildKilledAtEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script(t, dir, "bg.sh", `nohup sleep 9999 >/dev/null 2>&1 &
echo $!
sleep 9999 &
echo $!`)
	tools := build(t, dir, "tools:\n  - {name: bg, command: [./bg.sh], timeout: 30s}\n", nil)
	out, err := run(t, tools["bg"], `{}`)
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(out.(string))
	if len(pids) != 2 {
		t.Fatalf("output %q", out)
	}
	for _, p := range pids {
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		offloadtest.WaitDead(t, pid)
	}
}

// TestOutputFitsThePayload checks SPEC §9 "Encoded sizes": what a command
// tool accepts fits a result message once JSON-encoded, and what would not
// is ResultTooLarge at once.
func TestOutputFitsThePayload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script(t, dir, "max.sh", "head -c "+strconv.Itoa(cmdtool.MaxOutputBytes)+" /dev/zero | tr '\\0' x")
	// Half the limit of '<', each encoded as \u003c (6 bytes).
	script(t, dir, "escaped.sh", "head -c "+strconv.Itoa(cmdtool.MaxOutputBytes/2)+" /dev/zero | tr '\\0' '<'")
	tools := build(t, dir, `
tools:
  - {name: max, command: [./max.sh]}
  - {name: escaped, command: [./escaped.sh]}
`, nil)
	got, err := run(t, tools["max"], `{}`)
	if err != nil {
		t.Fatalf("max: %v", err)
	}
	res := protocol.ResultFromOutcome(got, nil)
	res.TaskID, res.ToolCallID, res.Worker = protocol.NewID(), "call_"+strings.Repeat("x", 64), "worker-"+strings.Repeat("w", 64)
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > protocol.DefaultMaxSize-1024 {
		t.Errorf("a result of %d bytes of output encodes to %d bytes, over the max payload", cmdtool.MaxOutputBytes, len(data))
	}
	_, err = run(t, tools["escaped"], `{}`)
	var rtl *cmdtool.ResultTooLarge
	if !errors.As(err, &rtl) {
		t.Errorf("escaped: err %v, want ResultTooLarge", err)
	}
}

func TestEnvParse(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"tools:\n  - {name: a, command: [x], env: [\"A=B\"]}\n",
		"tools:\n  - {name: a, command: [x], env: [\"\"]}\n",
		"tools:\n  - {name: a, command: [x], env: [\"1A\"]}\n",
	} {
		if _, err := cmdtool.Parse([]byte(bad)); !errors.Is(err, cmdtool.ErrInvalidConfig) {
			t.Errorf("%q: err %v, want ErrInvalidConfig", bad, err)
		}
	}
}
