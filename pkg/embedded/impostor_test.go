package embedded_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/embedded"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// ownerEnv names the store of the owner process of TestImpostorRefused.
const ownerEnv = "OFFLOAD_EMBEDDED_OWNER_STORE"

// TestOwnerProcess is the owner process of TestImpostorRefused (a re-exec
// of the test binary): it starts the store's server, says so on stdout
// and waits to be killed. Without the environment variable it does nothing.
func TestOwnerProcess(t *testing.T) {
	dir := os.Getenv(ownerEnv)
	if dir == "" {
		t.Skip("the owner process of TestImpostorRefused")
	}
	s, err := embedded.Start(context.Background(), embedded.Config{StoreDir: dir})
	if err != nil {
		_, _ = fmt.Fprintln(os.Stdout, "error", err)
		os.Exit(1)
	}
	_, _ = fmt.Fprintln(os.Stdout, "ready", s.URL(), s.ServerID())
	<-t.Context().Done() // until SIGKILL
}

// startOwner runs TestOwnerProcess on dir and returns it with its server's
// URL and ID.
func startOwner(t *testing.T, dir string) (cmd *exec.Cmd, url, id string) {
	t.Helper()
	cmd = exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestOwnerProcess$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), ownerEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "ready" {
		t.Fatalf("owner process: %q, %v", line, err)
	}
	return cmd, f[1], f[2]
}

// TestImpostorRefused replays finding 1 of issue 30 with real processes on
// loopback: the process that runs the store's server is SIGKILLed, and
// another local user's relay listens on the recorded port presenting the
// recorded server ID (it is public: in the greeting before
// authentication), in front of a server of its own. Neither the next start
// on the store nor a handle that shared the server before it went may
// connect to it. While the owner lives, a second process joins its server
// (SPEC §6.4).
func TestImpostorRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	owner, url, id := startOwner(t, dir)

	// A second process on the live store joins the first's server.
	joined, err := embedded.Start(context.Background(), embedded.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !joined.Shared() || joined.URL() != url || joined.ServerID() != id {
		t.Fatalf("second start: shared %v url %s id %s, want the owner's %s %s", joined.Shared(), joined.URL(), joined.ServerID(), url, id)
	}
	dial := func(s *embedded.Server) (*nats.Conn, error) {
		opt, err := nats.NkeyOptionFromSeed(s.NkeySeedFile())
		if err != nil {
			t.Fatal(err)
		}
		return nats.Connect(s.URL(), opt, nats.SetCustomDialer(s), nats.MaxReconnects(0), nats.Timeout(5*time.Second))
	}
	nc, err := dial(joined)
	if err != nil {
		t.Fatalf("joined the live server: %v", err)
	}
	nc.Close()

	// kill -9: the server goes with its process, nats.url stays.
	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	theirs := natstest.Start(t)
	im := natstest.NewImpostor(t, strings.TrimPrefix(url, "nats://"), theirs.URL(), id)
	// The impostor passes for the store's server with a client that
	// trusts the greeting (the store's nkey, the recorded ID).
	opt, err := nats.NkeyOptionFromSeed(joined.NkeySeedFile())
	if err != nil {
		t.Fatal(err)
	}
	naive, err := nats.Connect(url, opt, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("the impostor does not pass: %v", err)
	}
	if naive.ConnectedServerId() != id {
		t.Fatalf("the impostor presents %s, want %s", naive.ConnectedServerId(), id)
	}
	naive.Close()
	fooled := im.Connected()

	// The handle that shared the server before it went does not reach
	// the impostor (a reconnect dials the same way).
	if nc, err := dial(joined); err == nil {
		nc.Close()
		t.Fatal("the shared handle connected to the impostor")
	} else if !errors.Is(err, embedded.ErrNotRunning) {
		t.Errorf("dial after the owner went: %v, want ErrNotRunning", err)
	}

	// The next start on the store starts a server of its own.
	next, err := embedded.Start(context.Background(), embedded.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = next.Shutdown(context.Background()) })
	if next.Shared() || next.URL() == url {
		t.Fatalf("the next start trusted the impostor at %s (shared %v)", next.URL(), next.Shared())
	}
	nc, err = dial(next)
	if err != nil {
		t.Fatal(err)
	}
	if nc.ConnectedServerId() != next.ServerID() {
		t.Errorf("connected to %s, want %s", nc.ConnectedServerId(), next.ServerID())
	}
	nc.Close()
	if n := im.Connected() - fooled; n != 0 {
		t.Errorf("%d clients sent CONNECT to the impostor", n)
	}
}
