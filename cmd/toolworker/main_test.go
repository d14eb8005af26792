package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestMain runs the tests with goleak (offloadtest.WrapTestMain). This
// file also holds the tests of run, main.go's body.
func TestMain(m *testing.M) { offloadtest.WrapTestMain(m) }

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clash := filepath.Join(dir, "clash.yaml")
	writeFile(t, clash, "tools:\n  - name: sleep\n    description: x\n    command: [\"true\"]\n", 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "tools:\n  - name: ok\n    bogus_key: 1\n    command: [\"true\"]\n", 0o644)
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "nothing to serve"},
		{[]string{"--tools", "nope"}, `unknown tool "nope"`},
		{[]string{"--config", clash}, "has the name of a built-in tool"},
		{[]string{"--config", bad}, "bogus_key"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{[]string{"--tools", "all", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{[]string{"--tools", "all", "--prefix", "a.b"}, "prefix"},
		{[]string{"--tools", "all", "--id", "has.dot"}, "--id"},
		{[]string{"--tools", "all", "extra"}, "unexpected arguments"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, getenv, &stderr, nil, nil); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", tc.args, code, exitUsage)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), tc.want)
		}
	}
}

func TestNATSURLFromEnvironment(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--tools", "all"}, func(k string) string {
		if k == "NATS_URL" {
			return "nats://example.invalid:4222"
		}
		return ""
	}, os.Stderr)
	if err != nil || o.natsURL != "nats://example.invalid:4222" || o.concurrency != 4 || o.prefix != "tools" {
		t.Fatalf("options %+v, err %v", o, err)
	}
}

// TestSecurityFlags: credentials and the network policy reach the built-ins:
// the credential files are refused by read_file, the NATS server's port by
// http_fetch even with --allow-private-network.
func TestSecurityFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seed := filepath.Join(dir, "worker.nk")
	writeFile(t, seed, "SUAEXAMPLE", 0o600)
	o, err := parseFlags([]string{"--tools", "read_file,http_fetch", "--root", dir, "--nkey", seed,
		"--allow-private-network", "--nats", "nats://127.0.0.1:4999"}, func(string) string { return "" }, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !o.allowPrivate || o.conn.Nkey != seed {
		t.Fatalf("options %+v", o)
	}
	tools, err := selectTools(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*tool.Tool{}
	for _, tl := range tools {
		byName[tl.Name] = tl
	}
	_, err = byName["read_file"].Run(t.Context(), &tool.RunContext{}, json.RawMessage(`{"path":"worker.nk"}`))
	if err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("read_file of the worker's nkey: %v", err)
	}
	_, err = byName["http_fetch"].Run(t.Context(), &tool.RunContext{}, json.RawMessage(`{"url":"http://localhost:4999/"}`))
	if err == nil || !strings.Contains(err.Error(), "address not allowed") {
		t.Errorf("http_fetch of the NATS server: %v", err)
	}
}

func TestContextFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctxFile := filepath.Join(dir, "ops.json")
	writeFile(t, ctxFile, `{"url":"nats://10.1.2.3:4222","creds":"/etc/offload/worker.creds"}`, 0o600)
	o, err := parseFlags([]string{"--tools", "all", "--context", ctxFile}, func(string) string { return "" }, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.natsURL != "nats://10.1.2.3:4222" || !slices.Contains(credentialFiles(o), "/etc/offload/worker.creds") {
		t.Errorf("url %q, credential files %v", o.natsURL, credentialFiles(o))
	}
	o, err = parseFlags([]string{"--tools", "all", "--context", ctxFile, "--nats", "nats://h:1"}, func(string) string { return "" }, os.Stderr)
	if err != nil || o.natsURL != "nats://h:1" {
		t.Errorf("--nats must win over the context: %q %v", o.natsURL, err)
	}
	if _, err := parseFlags([]string{"--tools", "all", "--context", "nope"}, func(string) string { return "" }, os.Stderr); err == nil {
		t.Error("a missing context was accepted")
	}
}

func TestLogDurationsAsText(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: durationsAsText}))
	log.Info("stopping", slog.Duration("grace", 1500*time.Millisecond))
	if !strings.Contains(buf.String(), `"grace":"1.5s"`) {
		t.Fatalf("log line %s", buf.String())
	}
}

// SIGTERM while the worker is still starting (here: waiting for a server)
// stops it at once, as a stopped worker (exit 0), instead of once its
// start-up gives up (30 s), as a failure.
func TestSignalDuringStartStopsAtOnce(t *testing.T) {
	t.Parallel()
	url := "nats://127.0.0.1:" + strconv.Itoa(proctest.FreePort(t)) // nothing listens
	signals := make(chan os.Signal, 1)
	var stderr offloadtest.Output
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"--nats", url, "--tools", "sleep"}, func(string) string { return "" }, &stderr, signals, nil)
	}()
	signals <- syscall.SIGTERM
	select {
	case c := <-code:
		if c != exitOK {
			t.Fatalf("exit %d, want %d; stderr:\n%s", c, exitOK, stderr.String())
		}
	case <-time.After(4 * time.Second): // a call of the start-up waits 5 s
		t.Fatal("SIGTERM during start-up ignored")
	}
}

// --grace 0 means no grace period: SIGTERM hands a running task back at
// once, not after the default 30 s.
func TestZeroGraceHandsBackAtOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	signals := make(chan os.Signal, 1)
	var stderr offloadtest.Output
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"--nats", srv.URL(), "--tools", "sleep", "--grace", "0s", "-v"}, func(string) string { return "" }, &stderr, signals, nil)
	}()
	stderr.WaitFor(t, `"msg":"toolworker started"`)
	_, js := agentConn(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := publishTask(ctx, js, sleepTask(protocol.NewID(), 600)); err != nil {
		t.Fatal(err)
	}
	stderr.WaitFor(t, `"msg":"task started"`)
	signals <- syscall.SIGTERM
	c := offloadtest.WaitOrTimeout(t, code, "the exit after SIGTERM with --grace 0")
	if c != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", c, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"task handed back on shutdown"`) {
		t.Fatalf("the task was not handed back; stderr:\n%s", stderr.String())
	}
}

// A toolworker whose connection is closed for good (here: its password no
// longer accepted) exits 1, so that it is restarted, instead of staying up,
// ready, without a connection.
func TestClosedConnectionExits(t *testing.T) {
	t.Parallel()
	user := &server.User{Username: "worker", Password: "secret"}
	srv := natstest.Start(t, func(o *server.Options) { o.Users = []*server.User{user} })
	signals := make(chan os.Signal, 1)
	var stderr offloadtest.Output
	code := make(chan int, 1)
	url := strings.Replace(srv.URL(), "nats://", "nats://worker:secret@", 1)
	go func() {
		code <- run([]string{"--nats", url, "--tools", "sleep"}, func(string) string { return "" }, &stderr, signals, nil)
	}()
	stderr.WaitFor(t, `"msg":"toolworker started"`)
	user.Password = "changed" // the restarted server refuses the worker
	srv.Restart(t)
	select {
	case c := <-code:
		if c != exitFailed {
			t.Fatalf("exit %d, want %d; stderr:\n%s", c, exitFailed, stderr.String())
		}
	case <-time.After(15 * time.Second):
		signals <- syscall.SIGTERM
		t.Fatalf("still running 15 s after its connection was refused; stderr:\n%s", stderr.String())
	}
}

// The flags are cobra's now, and still take one dash as Go's flag package
// did: -name value, -name=value; -v is the verbose flag.
func TestSingleDashFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-tools", "all", "-nats", "nats://h:1", "-concurrency=2", "-v", "--", "x"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "unexpected arguments: x") {
		t.Fatalf("after --: %+v, %v", o, err)
	}
	o, err = parseFlags([]string{"-tools", "all", "-nats", "nats://h:1", "-concurrency=2", "-v"}, func(string) string { return "" }, io.Discard)
	if err != nil || o.tools != "all" || o.natsURL != "nats://h:1" || o.concurrency != 2 || !o.verbose {
		t.Fatalf("options %+v, err %v", o, err)
	}
	if _, err := parseFlags([]string{"-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, errHelp) {
		t.Fatalf("-h: %v, want the help", err)
	}
}

// A worker started before its server says so at once, naming the URL
// (issue 38: it said "ensure stream TOOLS_TASKS: context deadline
// exceeded" after 5 s), and starts once the server is there.
func TestNoServerYetSaysSo(t *testing.T) {
	t.Parallel()
	port := proctest.FreePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port) // nothing listens yet
	signals := make(chan os.Signal, 1)
	var stderr offloadtest.Output
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"--nats", url, "--tools", "sleep"}, func(string) string { return "" }, &stderr, signals, nil)
	}()
	stderr.WaitFor(t, `"msg":"no NATS server at `+url+` yet: waiting for one"`)
	natstest.Start(t, func(o *server.Options) { o.Port = port })
	stderr.WaitFor(t, `"msg":"toolworker started"`)
	signals <- syscall.SIGTERM
	if c := offloadtest.WaitOrTimeout(t, code, "the exit after SIGTERM"); c != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", c, stderr.String())
	}
}

// toolworker --help names its check subcommand (issue 38).
func TestHelpNamesCheck(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if code := run([]string{"--help"}, func(string) string { return "" }, &stderr, nil, nil); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	if !strings.Contains(stderr.String(), "toolworker check --tool NAME") {
		t.Errorf("--help does not name check:\n%s", stderr.String())
	}
}
