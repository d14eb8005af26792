package embedded_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/offload-dev/offload/pkg/embedded"
)

// TestClientWithoutCredentialsRefused (SPEC §6.4): the embedded server
// accepts only the store's nkey.
func TestClientWithoutCredentialsRefused(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())

	if nc, err := nats.Connect(s.URL(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was accepted")
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("anonymous client: %v, want an authorization violation", err)
	}
	if nc, err := nats.Connect(s.URL(), nats.UserInfo("admin", "admin"), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a user/password client was accepted")
	}
	// Another nkey, well-formed but not the store's.
	other, _ := nkeys.CreateUser()
	seed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	opt, err := nats.NkeyOptionFromSeed(otherFile)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(s.URL(), opt, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a foreign nkey was accepted")
	}
	nc := connect(t, s)
	defer nc.Close()
	if err := nc.Publish("x", nil); err != nil {
		t.Fatal(err)
	}
	if nc.ConnectedServerId() != s.ServerID() {
		t.Errorf("server id %q, recorded %q", nc.ConnectedServerId(), s.ServerID())
	}
}

// TestStoreModes: the store directory is 0700 (tightened when it exists) and
// its files 0600; the seed survives restarts.
func TestStoreModes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := start(t, dir)
	mode := func(p string) os.FileMode {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if m := mode(dir); m != 0o700 {
		t.Errorf("store mode %o, want 700", m)
	}
	for _, f := range []string{embedded.NkeyFile, embedded.URLFile, embedded.ServerIDFile, embedded.LockFile} {
		if m := mode(filepath.Join(dir, f)); m != 0o600 {
			t.Errorf("%s mode %o, want 600", f, m)
		}
	}
	if s.NkeySeedFile() != filepath.Join(dir, embedded.NkeyFile) || !filepath.IsAbs(s.NkeySeedFile()) {
		t.Errorf("seed file %q", s.NkeySeedFile())
	}
	seed, _ := os.ReadFile(s.NkeySeedFile())
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Loosened by someone: tightened again, and the same seed is used.
	if err := os.Chmod(s.NkeySeedFile(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s2 := start(t, dir)
	if m := mode(s2.NkeySeedFile()); m != 0o600 {
		t.Errorf("seed mode %o after restart, want 600", m)
	}
	if m := mode(dir); m != 0o700 {
		t.Errorf("store mode %o after restart, want 700", m)
	}
	if seed2, _ := os.ReadFile(s2.NkeySeedFile()); string(seed2) != string(seed) {
		t.Error("the seed changed across restarts")
	}
	nc := connect(t, s2)
	nc.Close()
}

// TestStaleURLForeignServer (SPEC §6.4): nats.url names a port where
// another NATS server with JetStream now listens; it is not the store's
// server (its ID differs), so a new embedded server is started.
func TestStaleURLForeignServer(t *testing.T) {
	t.Parallel()
	foreign, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go foreign.Start()
	t.Cleanup(func() { foreign.Shutdown(); foreign.WaitForShutdown() })
	if !foreign.ReadyForConnections(10 * time.Second) {
		t.Fatal("foreign server not ready")
	}
	for name, recordedID := range map[string]string{"other id recorded": "NOTTHEFOREIGNSERVER", "no id recorded": ""} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, embedded.URLFile), []byte(foreign.ClientURL()+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if recordedID != "" {
				if err := os.WriteFile(filepath.Join(dir, embedded.ServerIDFile), []byte(recordedID+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := start(t, dir)
			if s.Shared() || s.URL() == foreign.ClientURL() || s.ServerID() == foreign.ID() {
				t.Fatalf("the foreign server at %s was taken for the store's", foreign.ClientURL())
			}
			if u, _ := readURL(t, dir); u != s.URL() {
				t.Errorf("nats.url = %q, want %q", u, s.URL())
			}
			id, _ := os.ReadFile(filepath.Join(dir, embedded.ServerIDFile))
			if strings.TrimSpace(string(id)) != s.ServerID() {
				t.Errorf("recorded id %q, want %q", id, s.ServerID())
			}
			nc := connect(t, s)
			nc.Close()
		})
	}
}
