package natstest

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/proctest"
)

// BuildNATSServer builds the nats-server binary of the module's own
// nats-server dependency into dir and returns its path.
func BuildNATSServer(t testing.TB, dir string) string {
	t.Helper()
	proctest.Build(t, dir, "github.com/nats-io/nats-server/v2")
	return filepath.Join(dir, "nats-server")
}

// NATSServer is a nats-server process with JetStream on 127.0.0.1, a fixed
// port and a store directory, so that it can be SIGKILLed and restarted on
// the same data ([proctest.Process.Kill], [NATSServer.Restart]).
type NATSServer struct {
	*proctest.Process
	port int
	dir  string
}

// StartNATSServer starts the nats-server binary bin (see
// [BuildNATSServer]) on a free port with its store under t.TempDir() and
// waits until it is ready.
func StartNATSServer(t testing.TB, bin string) *NATSServer {
	t.Helper()
	dir := t.TempDir()
	port := proctest.FreePort(t)
	s := &NATSServer{port: port, dir: dir}
	s.Process = proctest.StartProcess(t, bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir)
	s.WaitLog(t, "Server is ready", 30*time.Second)
	return s
}

// URL returns the client URL; it stays the same across restarts.
func (s *NATSServer) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Restart kills the server if it runs, starts it again on the same port
// and store, and waits until it is ready.
func (s *NATSServer) Restart(t testing.TB) {
	t.Helper()
	s.Process.Restart(t)
	s.WaitLog(t, "Server is ready", 60*time.Second)
}
