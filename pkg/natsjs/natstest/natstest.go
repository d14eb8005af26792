// Package natstest runs an in-process nats-server with JetStream for tests:
// loopback only, a random port, a per-test store directory, and everything
// shut down when the test ends.
//
//	func TestX(t *testing.T) {
//		srv := natstest.Start(t)
//		js := srv.JetStream(t)
//		…
//	}
//
// It is also a fault-injection toolkit: [Server.Restart] restarts the
// server on the same port and store (a crash and recovery of the server),
// [NewProxy] puts a TCP proxy between a client and the server that can cut
// and restore the connection, and [StartNATSServer] runs a nats-server
// process that a test may SIGKILL and restart (the binaries of the
// module's own commands run with internal/proctest).
package natstest

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Option changes the server's options before it starts.
type Option func(*server.Options)

// MaxPayload sets the server's max_payload (default 1 MiB).
func MaxPayload(n int32) Option { return func(o *server.Options) { o.MaxPayload = n } }

// MaxPending sets the server's max_pending: the most bytes it holds for
// a client that reads too slowly before it cuts the connection as a slow
// consumer (default 64 MiB; at least max_payload).
func MaxPending(n int64) Option { return func(o *server.Options) { o.MaxPending = n } }

// StoreDir makes the server store JetStream data under dir instead of a
// fresh t.TempDir(), e.g. to restart a server on the same data.
func StoreDir(dir string) Option { return func(o *server.Options) { o.StoreDir = dir } }

// Server is a running in-process nats-server. Its methods may be called
// from any goroutine.
type Server struct {
	opts server.Options // the first start's options, with its port

	mu  sync.Mutex
	srv *server.Server
}

// Start starts a nats-server with JetStream on 127.0.0.1 with a random port
// and a store under t.TempDir(). The server is shut down, and waited for,
// when the test ends, before the store directory is removed. Start calls
// t.Fatal when the server cannot start.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	// The directory first: cleanups run last-in first-out, so the server's
	// shutdown (registered below) runs before the directory is removed.
	dir := t.TempDir()
	o := server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{opts: o}
	srv, err := s.boot()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	s.srv = srv
	// Later starts reuse the port the first one got, so that clients
	// reconnect to the same URL.
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("natstest: server address %v", srv.Addr())
	}
	s.opts.Port = addr.Port
	t.Cleanup(s.Shutdown)
	return s
}

func (s *Server) boot() (*server.Server, error) {
	o := s.opts // a copy: the server keeps and changes its options
	srv, err := server.NewServer(&o)
	if err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("server not ready")
	}
	return srv, nil
}

// Shutdown stops the server and waits until it has stopped: a crash from
// the clients' point of view (their connections drop). It is harmless on a
// stopped server.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
}

// Restart shuts the server down (if it runs) and starts it again on the
// same port and store: streams, consumers and messages written to file
// storage survive, and clients reconnect to the same URL. It calls t.Fatal
// when the server cannot start again.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	var err error
	for range 50 { // the port may take a moment to be free again
		var srv *server.Server
		if srv, err = s.boot(); err == nil {
			s.srv = srv
			return
		}
		time.Sleep(20 * time.Millisecond) // no signal exists for a port becoming free
	}
	t.Fatalf("natstest: restart: %v", err)
}

// URL returns the client URL, nats://127.0.0.1:<port>. It stays the same
// across restarts.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.opts.Port) }

// StoreDir returns the JetStream store directory.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// NATS returns the underlying server (the current one, after a restart),
// e.g. to shut it down early.
func (s *Server) NATS() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Conn connects to the server; the connection is closed when the test ends
// (before the server shuts down). Extra client options may be given.
func (s *Server) Conn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return Connect(t, s.URL(), opts...)
}

// Connect connects to url (a server's or a [Proxy]'s); the connection is
// closed when the test ends.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Reconnecting are client options for a connection that must survive
// faults: it reconnects forever, every wait.
func Reconnecting(wait time.Duration) []nats.Option {
	return []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(wait), nats.ReconnectJitter(0, 0), nats.RetryOnFailedConnect(true)}
}

// JetStream returns a JetStream context on a new connection (see [Server.Conn]).
func (s *Server) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(s.Conn(t))
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}
