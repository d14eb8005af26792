package cmdtool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/cmdtool"
	"github.com/offload-dev/offload/pkg/tool"
)

// script writes an executable shell script into dir and returns its name.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// build parses yamlText, builds its tools in dir and returns them by name.
func build(t *testing.T, dir, yamlText string, log *slog.Logger) map[string]*tool.Tool {
	t.Helper()
	cfg, err := cmdtool.Parse([]byte(yamlText))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tools, err := cfg.Tools(cmdtool.Options{Dir: dir, Logger: log})
	if err != nil {
		t.Fatalf("Tools: %v", err)
	}
	m := map[string]*tool.Tool{}
	for _, tl := range tools {
		m[tl.Name] = tl
	}
	return m
}

func run(t *testing.T, tl *tool.Tool, args string) (any, error) {
	t.Helper()
	return tl.Run(t.Context(), &tool.RunContext{ToolName: tl.Name}, json.RawMessage(args))
}

func TestParseFullSpec(t *testing.T) {
	t.Parallel()
	cfg, err := cmdtool.Parse([]byte(`
tools:
  - name: research                 # subject-safe
    description: Research a topic thoroughly.
    command: ["python3", "research.py"]
    timeout: 10m                   # default 1m
    parameters:                    # JSON Schema of the arguments
      type: object
      properties: {query: {type: string}}
      required: [query]
    metadata: {background: true}
    requires_approval: true
    output: json
  - name: plain
    command: [cat]
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Specs) != 2 {
		t.Fatalf("got %d specs, want 2", len(cfg.Specs))
	}
	s := cfg.Specs[0]
	if s.Name != "research" || s.Description != "Research a topic thoroughly." ||
		strings.Join(s.Command, " ") != "python3 research.py" || time.Duration(s.Timeout) != 10*time.Minute ||
		s.Metadata["background"] != true || !s.RequiresApproval || s.Output != "json" {
		t.Errorf("spec = %+v", s)
	}
	if s.Parameters["type"] != "object" || len(s.Parameters["required"].([]any)) != 1 {
		t.Errorf("parameters = %v", s.Parameters)
	}
	if p := cfg.Specs[1]; p.Timeout != 0 || p.Output != "" || p.Parameters != nil {
		t.Errorf("defaults: %+v", p)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"UnknownKey", "tools:\n  - name: a\n    command: [cat]\n    retries: 3\n", []string{"line 4", "field retries not found"}},
		{"UnknownTopLevelKey", "tools:\n  - name: a\n    command: [cat]\nworkers: 2\n", []string{"line 4", "field workers not found"}},
		{"Syntax", "tools: [\n", []string{"yaml"}},
		{"Empty", "", []string{"no tools declared"}},
		{"NoTools", "tools: []\n", []string{"no tools declared"}},
		{"TwoDocuments", "tools:\n  - name: a\n    command: [cat]\n---\ntools: []\n", []string{"more than one YAML document"}},
		{"BadName", "tools:\n  - name: a.b\n    command: [cat]\n", []string{"line 2", `"a.b"`, "must match"}},
		{"EmptyName", "tools:\n  - command: [cat]\n", []string{"line 2", "must match"}},
		{"Duplicate", "tools:\n  - name: a\n    command: [cat]\n  - name: a\n    command: [cat]\n", []string{"line 4", "duplicate tool name", "line 2"}},
		{"NoCommand", "tools:\n  - name: a\n", []string{"line 2", "command is empty"}},
		{"EmptyCommand", "tools:\n  - name: a\n    command: []\n", []string{"command is empty"}},
		{"CommandNotList", "tools:\n  - name: a\n    command: cat x\n", []string{"line 3"}},
		{"BadOutput", "tools:\n  - name: a\n    command: [cat]\n    output: xml\n", []string{"line 2", `output "xml"`}},
		{"ParamsNotObjectType", "tools:\n  - name: a\n    command: [cat]\n    parameters: {type: string}\n", []string{"object schema"}},
		{"ParamsNoType", "tools:\n  - name: a\n    command: [cat]\n    parameters: {properties: {}}\n", []string{"object schema"}},
		{"ParamsNotMap", "tools:\n  - name: a\n    command: [cat]\n    parameters: [1, 2]\n", []string{"line 4"}},
		{"ParamsBadSchema", "tools:\n  - name: a\n    command: [cat]\n    parameters: {type: object, properties: 5}\n", []string{"line 2", "JSON Schema"}},
		{"BadTimeout", "tools:\n  - name: a\n    command: [cat]\n    timeout: soon\n", []string{"line 4", `"soon"`}},
		{"NegativeTimeout", "tools:\n  - name: a\n    command: [cat]\n    timeout: -1s\n", []string{"line 4", "positive"}},
		{"ZeroTimeout", "tools:\n  - name: a\n    command: [cat]\n    timeout: 0s\n", []string{"positive"}},
		{"BadApproval", "tools:\n  - name: a\n    command: [cat]\n    requires_approval: maybe\n", []string{"line 4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := cmdtool.Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if !errors.Is(err, cmdtool.ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q misses %q", err, w)
				}
			}
		})
	}
}

func TestLoadRunsInConfigDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script(t, dir, "where.sh", "pwd")
	cfgPath := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(cfgPath, []byte("tools:\n  - name: where\n    command: [./where.sh]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := cmdtool.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cfg.Tools(cmdtool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := run(t, tools[0], `{}`)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(dir)
	if g, _ := filepath.EvalSymlinks(got.(string)); g != want {
		t.Errorf("ran in %q, want %q", got, dir)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := cmdtool.Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want ErrNotExist", err)
	}
	p := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(p, []byte("tools:\n  - name: a\n    command: [cat]\n    bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := cmdtool.Load(p)
	if !errors.Is(err, cmdtool.ErrInvalidConfig) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("bad file: err = %v", err)
	}
}

func TestToolsMissingProgram(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, prog := range []string{"./nope.sh", "offload-no-such-program"} {
		cfg, err := cmdtool.Parse([]byte(fmt.Sprintf("tools:\n  - name: a\n    command: [%q]\n", prog)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.Tools(cmdtool.Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "command") {
			t.Errorf("%s: err = %v, want a command error", prog, err)
		}
	}
}

func TestDefinitionPassesThrough(t *testing.T) {
	t.Parallel()
	tools := build(t, t.TempDir(), `
tools:
  - name: research
    description: Research a topic thoroughly.
    command: [cat]
    parameters:
      type: object
      properties: {query: {type: string}}
      required: [query]
    metadata: {background: optional, team: search}
    requires_approval: true
  - name: bare
    command: [cat]
`, nil)
	r := tools["research"]
	if r.Description != "Research a topic thoroughly." || !r.RequiresApproval ||
		r.Metadata["background"] != "optional" || r.Metadata["team"] != "search" {
		t.Errorf("tool = %+v", r)
	}
	if !r.HasParameter("query") {
		t.Errorf("parameters = %s", r.Parameters)
	}
	if _, err := r.ParseArgs(`{}`); err == nil {
		t.Error("schema not enforced: missing required query accepted")
	}
	if _, err := r.ParseArgs(`{"query":"x"}`); err != nil {
		t.Errorf("valid args refused: %v", err)
	}
	if b := tools["bare"]; b.RequiresApproval || string(b.Parameters) != `{"type":"object","properties":{}}` {
		t.Errorf("bare tool = %+v params %s", b, b.Parameters)
	}
	// The timeout is the tool's (advertised in its registry entry): the
	// spec's, else the default.
	if r.Timeout != cmdtool.DefaultTimeout {
		t.Errorf("timeout %v, want the default %v", r.Timeout, cmdtool.DefaultTimeout)
	}
	if tl := build(t, t.TempDir(), "tools:\n  - {name: slow, command: [cat], timeout: 10m}\n", nil)["slow"]; tl.Timeout != 10*time.Minute {
		t.Errorf("timeout %v, want 10m", tl.Timeout)
	}
}

func TestRunText(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script(t, dir, "echo.sh", `cat; echo`)
	script(t, dir, "two.sh", `printf 'a\n\n'`)
	script(t, dir, "crlf.sh", `printf 'a\r\n'`)
	script(t, dir, "none.sh", `printf 'a'`)
	script(t, dir, "argv.sh", `printf '%s|' "$@"`)
	tools := build(t, dir, `
tools:
  - {name: echo, command: [./echo.sh]}
  - {name: two, command: [./two.sh]}
  - {name: crlf, command: [./crlf.sh]}
  - {name: none, command: [./none.sh]}
  - {name: argv, command: [./argv.sh, "x y", z]}
`, nil)
	tests := []struct{ tool, args, want string }{
		{"echo", `{"query":"go"}`, `{"query":"go"}`},
		{"echo", ``, `{}`},
		{"two", `{}`, "a\n"},
		{"crlf", `{}`, "a\r"},
		{"none", `{}`, "a"},
		{"argv", `{}`, "x y|z|"},
	}
	for _, tc := range tests {
		got, err := run(t, tools[tc.tool], tc.args)
		if err != nil {
			t.Errorf("%s: %v", tc.tool, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s(%s) = %q, want %q", tc.tool, tc.args, got, tc.want)
		}
	}
}

func TestRunJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script(t, dir, "ok.sh", `echo '{"answer": 42, "big": 12345678901234567890}'`)
	script(t, dir, "bad.sh", `echo 'not json'`)
	script(t, dir, "empty.sh", `true`)
	tools := build(t, dir, `
tools:
  - {name: ok, command: [./ok.sh], output: json}
  - {name: bad, command: [./bad.sh], output: json}
  - {name: empty, command: [./empty.sh], output: json}
`, nil)
	got, err := run(t, tools["ok"], `{}`)
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := got.(json.RawMessage)
	if !ok || string(raw) != `{"answer":42,"big":12345678901234567890}` {
		t.Errorf("ok = %#v", got)
	}
	for _, name := range []string{"bad", "empty"} {
		_, err := run(t, tools[name], `{}`)
		var inv *cmdtool.InvalidOutput
		if !errors.As(err, &inv) || tool.ErrorType(err) != "InvalidOutput" {
			t.Errorf("%s: err = %v (type %s), want InvalidOutput", name, err, tool.ErrorType(err))
		}
	}
}

func TestCommandFailedHidesStderr(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script(t, dir, "fail.sh", `echo "partial"; echo "secret token xyz" >&2; exit 3`)
	var logs offloadtest.Output
	log := slog.New(slog.NewTextHandler(&logs, nil))
	tools := build(t, dir, "tools:\n  - {name: fail, command: [./fail.sh]}\n", log)

	_, err := run(t, tools["fail"], `{}`)
	var cf *cmdtool.CommandFailed
	if !errors.As(err, &cf) {
		t.Fatalf("err = %v, want *CommandFailed", err)
	}
	if tool.ErrorType(err) != "CommandFailed" {
		t.Errorf("ErrorType = %q", tool.ErrorType(err))
	}
	if cf.ExitCode != 3 || cf.Tool != "fail" {
		t.Errorf("CommandFailed = %+v", cf)
	}
	if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "partial") {
		t.Errorf("error message leaks output: %q", err)
	}
	if !strings.Contains(logs.String(), "secret token xyz") {
		t.Errorf("stderr not logged: %q", logs.String())
	}
}

func TestExitOneIsCommandFailed(t *testing.T) {
	t.Parallel()
	tools := build(t, t.TempDir(), "tools:\n  - {name: f, command: [/bin/sh, -c, 'exit 1']}\n", nil)
	_, err := run(t, tools["f"], `{}`)
	if tool.ErrorType(err) != "CommandFailed" {
		t.Fatalf("err = %v (type %s)", err, tool.ErrorType(err))
	}
}

func TestResultTooLarge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	limit := strconv.Itoa(cmdtool.MaxOutputBytes)
	over := strconv.Itoa(cmdtool.MaxOutputBytes + 1)
	script(t, dir, "max.sh", "head -c "+limit+" /dev/zero | tr '\\0' x")
	script(t, dir, "over.sh", "head -c "+over+" /dev/zero | tr '\\0' x")
	script(t, dir, "huge.sh", "head -c 20000000 /dev/zero") // must not block on a full pipe
	tools := build(t, dir, `
tools:
  - {name: max, command: [./max.sh]}
  - {name: over, command: [./over.sh]}
  - {name: huge, command: [./huge.sh], timeout: 30s}
`, nil)
	got, err := run(t, tools["max"], `{}`)
	if err != nil || len(got.(string)) != cmdtool.MaxOutputBytes {
		t.Errorf("max: len %d, err %v", len(fmt.Sprint(got)), err)
	}
	for _, name := range []string{"over", "huge"} {
		_, err := run(t, tools[name], `{}`)
		var rtl *cmdtool.ResultTooLarge
		if !errors.As(err, &rtl) || tool.ErrorType(err) != "ResultTooLarge" || rtl.Limit != cmdtool.MaxOutputBytes {
			t.Errorf("%s: err = %v, want ResultTooLarge", name, err)
		}
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script(t, dir, "slow.sh", `sleep 30 & sleep 30`) // the background child holds stdout too
	tools := build(t, dir, "tools:\n  - {name: slow, command: [./slow.sh], timeout: 100ms}\n", nil)
	start := time.Now()
	_, err := run(t, tools["slow"], `{}`)
	var de *cmdtool.DeadlineExceeded
	if !errors.As(err, &de) || tool.ErrorType(err) != "DeadlineExceeded" || de.Timeout != 100*time.Millisecond {
		t.Fatalf("err = %v (type %s), want DeadlineExceeded", err, tool.ErrorType(err))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Error("DeadlineExceeded does not match context.DeadlineExceeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s; the process group was not killed promptly", d)
	}
}

// TestCancelKillsProcessGroup cancels a call whose command started a child,
// and checks that both die.
func TestCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pids")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	script(t, dir, "tree.sh", `sleep 30 & echo "$$ $!" > pids; wait`)
	tools := build(t, dir, "tools:\n  - {name: tree, command: [./tree.sh]}\n", nil)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := tools["tree"].Run(ctx, &tool.RunContext{}, json.RawMessage(`{}`))
		done <- err
	}()
	pids, err := os.ReadFile(fifo) // blocks until the script has started its child
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	err = offloadtest.WaitOrTimeout(t, done, "Run to return after cancel")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	for _, f := range strings.Fields(string(pids)) {
		pid, _ := strconv.Atoi(f)
		offloadtest.WaitDead(t, pid)
	}
}

func Example() {
	dir, _ := os.MkdirTemp("", "cmdtool")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "shout.sh"), []byte("#!/bin/sh\ntr a-z A-Z\n"), 0o755)

	cfg, err := cmdtool.Parse([]byte(`
tools:
  - name: shout
    description: Repeat the arguments, loudly.
    command: ["./shout.sh"]
    parameters:
      type: object
      properties: {text: {type: string}}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	tools, err := cfg.Tools(cmdtool.Options{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := tools[0].Run(context.Background(), &tool.RunContext{}, json.RawMessage(`{"text":"hello"}`))
	fmt.Println(out, err)
	// Output: {"TEXT":"HELLO"} <nil>
}

// A command exiting 75 (EX_TEMPFAIL) says the service behind it refused the
// call for now: a tool.RateLimited of the seconds it wrote on stdout, a
// number or {"retry_after": N}, one second when it wrote neither.
func TestExitTempFailIsRateLimited(t *testing.T) {
	t.Parallel()
	tools := build(t, t.TempDir(), `tools:
  - {name: n, command: [/bin/sh, -c, 'echo 2.5; exit 75']}
  - {name: j, command: [/bin/sh, -c, 'echo "{\"retry_after\": 4}"; exit 75']}
  - {name: none, command: [/bin/sh, -c, 'echo busy; exit 75']}
`, nil)
	for name, want := range map[string]time.Duration{"n": 2500 * time.Millisecond, "j": 4 * time.Second, "none": cmdtool.DefaultRetryAfter} {
		_, err := run(t, tools[name], `{}`)
		var rl *tool.RateLimited
		if !errors.As(err, &rl) || rl.After != want {
			t.Errorf("tool %s: err %v, want RateLimited after %v", name, err, want)
		}
	}
}

// A tool's limits are read from its spec, checked, and carried by its tool.
func TestLimitsOfSpec(t *testing.T) {
	t.Parallel()
	tools := build(t, t.TempDir(), `tools:
  - name: paid
    command: [cat]
    limits: {max_in_flight: 2, key: tenant, rate: {limit: 30, period: 1m}, priority: 2}
`, nil)
	l := tools["paid"].Limits
	if l == nil || l.MaxInFlight != 2 || l.Key != "tenant" || l.Rate == nil || l.Rate.Limit != 30 ||
		time.Duration(l.Rate.Period) != time.Minute || l.Priority != 2 {
		t.Errorf("limits %+v", l)
	}
	_, err := cmdtool.Parse([]byte("tools:\n  - name: a\n    command: [cat]\n    limits: {priority: 9}\n"))
	if !errors.Is(err, cmdtool.ErrInvalidConfig) || !strings.Contains(err.Error(), "priority 9") {
		t.Errorf("a priority out of range: %v", err)
	}
}
