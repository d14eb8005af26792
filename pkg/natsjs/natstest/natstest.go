// Package natstest runs an in-process nats-server with JetStream for tests:
// loopback only, a random port, a per-test store directory, and everything
// shut down when the test ends.
//
//	func TestX(t *testing.T) {
//		srv := natstest.Start(t)
//		js := srv.JetStream(t)
//		…
//	}
package natstest

import (
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

// StoreDir makes the server store JetStream data under dir instead of a
// fresh t.TempDir(), e.g. to restart a server on the same data.
func StoreDir(dir string) Option { return func(o *server.Options) { o.StoreDir = dir } }

// Server is a running in-process nats-server.
type Server struct {
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
	o := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	}
	for _, opt := range opts {
		opt(o)
	}
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatalf("natstest: server not ready")
	}
	return &Server{srv: srv}
}

// URL returns the client URL, nats://127.0.0.1:<port>.
func (s *Server) URL() string { return s.srv.ClientURL() }

// NATS returns the underlying server, e.g. to shut it down early.
func (s *Server) NATS() *server.Server { return s.srv }

// Conn connects to the server; the connection is closed when the test ends
// (before the server shuts down). Extra client options may be given.
func (s *Server) Conn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
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
