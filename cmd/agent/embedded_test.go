package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/embedded"
	"github.com/offload-dev/offload/pkg/natsjs"
)

// ownerServer starts the store's embedded server in the test, so that it
// outlives the agent processes the test runs (they share it).
func ownerServer(t *testing.T) (*embedded.Server, string) {
	t.Helper()
	store := filepath.Join(t.TempDir(), "store")
	srv, err := embedded.Start(context.Background(), embedded.Config{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv, store
}

// TestEmbeddedPrintsWorkingNATSCommand: the `nats CLI:` line the agent
// prints on the embedded default works when pasted into a shell, with the
// real nats CLI.
func TestEmbeddedPrintsWorkingNATSCommand(t *testing.T) {
	t.Parallel()
	cli := natsCLIPath(t)
	srv, store := ownerServer(t)
	out := runBinary(t, nil, "run", "--model", "test", "--store", store, "--tools", "sleep", "hello")
	if out.code != 0 {
		t.Fatalf("exit %d\n%s", out.code, out.stderr)
	}
	var line string
	for _, l := range strings.Split(out.stderr, "\n") {
		if rest, ok := strings.CutPrefix(l, "nats CLI: "); ok {
			line = rest
		}
	}
	if !strings.HasPrefix(line, "nats ") || !strings.Contains(line, "--nkey "+srv.NkeySeedFile()) {
		t.Fatalf("printed nats CLI line %q\nstderr: %s", line, out.stderr)
	}
	sh := exec.Command("/bin/sh", "-c", line+" stream ls --names")
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(cli)+":"+os.Getenv("PATH"), "XDG_CONFIG_HOME="+t.TempDir())
	got, err := sh.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "TOOLS_TASKS") {
		t.Fatalf("%s stream ls: %v\n%s", line, err, got)
	}
}

// TestEmbeddedServesOnlySelectedBuiltins: with --tools sleep, the embedded
// default binds the task consumer of sleep only (a shell task published by
// anyone would find no consumer).
func TestEmbeddedServesOnlySelectedBuiltins(t *testing.T) {
	t.Parallel()
	srv, store := ownerServer(t)
	out := runBinary(t, nil, "run", "--model", "test", "--store", store, "--tools", "sleep", "hello")
	if out.code != 0 {
		t.Fatalf("exit %d\n%s", out.code, out.stderr)
	}
	if names := taskConsumers(t, srv); !slices.Equal(names, []string{natsjs.TaskConsumerName("sleep")}) {
		t.Errorf("task consumers %v, want only %s", names, natsjs.TaskConsumerName("sleep"))
	}
}

// TestEmbeddedOffersNoShellByDefault (issue 30, finding 7; SPEC §9):
// without --tools the embedded default serves every built-in tool but
// shell, which runs only when --tools names it.
func TestEmbeddedOffersNoShellByDefault(t *testing.T) {
	t.Parallel()
	srv, store := ownerServer(t)
	// The test model calls write_file, which waits for an approval: exit 3.
	out := runBinary(t, nil, "run", "--model", "test", "--store", store, "hello")
	if out.code != 0 && out.code != exitPaused {
		t.Fatalf("exit %d\n%s", out.code, out.stderr)
	}
	names := taskConsumers(t, srv)
	if slices.Contains(names, natsjs.TaskConsumerName("shell")) || !slices.Contains(names, natsjs.TaskConsumerName("read_file")) {
		t.Errorf("task consumers without --tools: %v, want the built-ins but shell", names)
	}
	out = runBinary(t, nil, "run", "--model", "test", "--store", store, "--tools", "shell", "--root", proctest.ToolDir(t), "hello")
	if out.code != 0 && out.code != exitPaused {
		t.Fatalf("--tools shell: exit %d\n%s", out.code, out.stderr)
	}
	if names := taskConsumers(t, srv); !slices.Contains(names, natsjs.TaskConsumerName("shell")) {
		t.Errorf("task consumers with --tools shell: %v", names)
	}
}

// taskConsumers returns the names of the task stream's consumers on srv.
func taskConsumers(t *testing.T, srv *embedded.Server) []string {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(srv.NkeySeedFile())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(t.Context(), natsjs.NamesFor("").Tasks)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	lister := stream.ConsumerNames(t.Context())
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func TestNATSCLIQuoting(t *testing.T) {
	t.Parallel()
	got := natsCLI([]string{"--server", "nats://127.0.0.1:4222", "--nkey", "/home/o'brien/my store/nats.nk", "--no-context"})
	want := `nats --server nats://127.0.0.1:4222 --nkey '/home/o'\''brien/my store/nats.nk' --no-context`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	out, err := exec.Command("/bin/sh", "-c", "printf '%s\\n' "+strings.TrimPrefix(got, "nats ")).Output()
	if err != nil || !strings.Contains(string(out), "\n/home/o'brien/my store/nats.nk\n") {
		t.Errorf("the shell reads %q (%v)", out, err)
	}
}

func TestProvisionUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"provision"},
		{"provision", "--nats", "nats://127.0.0.1:1", "--prefix", "a.b"},
		{"provision", "--nats", "nats://127.0.0.1:1", "--tools", "bad name"},
		{"provision", "extra"},
		{"provision", "--context", "no-such-context"},
	} {
		var stderr strings.Builder
		e := env{getenv: func(k string) string {
			if k == "XDG_CONFIG_HOME" {
				return t.TempDir()
			}
			return ""
		}, stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: &stderr}
		if code := execute(t.Context(), args, e); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, stderr.String())
		}
	}
}

// agent serve refuses a sweep interval that is not positive, before it
// connects to anything.
func TestServeUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--spec", "../../examples/demo/agent.yaml", "--sweep-interval", "0s"},
		{"serve", "--spec", "../../examples/demo/agent.yaml", "--sweep-interval", "-1s"},
		{"serve", "--spec", "../../examples/demo/agent.yaml", "--http", "0.0.0.0:0"},
		{"serve", "extra"},
	} {
		var stderr strings.Builder
		e := env{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &strings.Builder{}, stderr: &stderr}
		if code := execute(t.Context(), args, e); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, stderr.String())
		}
	}
}
