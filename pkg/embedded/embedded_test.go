package embedded_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/embedded"
)

func start(t *testing.T, dir string) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(context.Background(), embedded.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}

// connect connects to s as the store's user.
func connect(t *testing.T, s *embedded.Server) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(s.NkeySeedFile())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.URL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

func readURL(t *testing.T, dir string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, embedded.URLFile))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b)), true
}

func TestStartShareShutdown(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store") // created by Start
	first := start(t, dir)
	if first.Shared() || !strings.HasPrefix(first.URL(), "nats://127.0.0.1:") {
		t.Fatalf("first: shared %v url %q", first.Shared(), first.URL())
	}
	if u, ok := readURL(t, dir); !ok || u != first.URL() {
		t.Fatalf("nats.url = %q, %v", u, ok)
	}

	// JetStream works and stores under <store>/jetstream.
	nc := connect(t, first)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, embedded.JetStreamDir, "jetstream")); err != nil {
		t.Errorf("store layout: %v", err)
	}

	second := start(t, dir)
	if !second.Shared() || second.URL() != first.URL() {
		t.Fatalf("second: shared %v url %q, want %q", second.Shared(), second.URL(), first.URL())
	}
	if err := second.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := readURL(t, dir); !ok {
		t.Fatal("a shared handle's shutdown removed nats.url")
	}

	nc.Close()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if u, ok := readURL(t, dir); ok {
		t.Fatalf("nats.url still there after shutdown: %q", u)
	}
	if c, err := net.Dial("tcp", strings.TrimPrefix(first.URL(), "nats://")); err == nil {
		// The port is free once the server is gone, and another test
		// process's server may have taken it since: only this server's
		// greeting (its INFO naming its ID) says it still listens.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		info, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if strings.Contains(info, first.ServerID()) {
			t.Fatal("server still listening after shutdown")
		}
	}

	// A restart on the same store keeps JetStream data.
	third := start(t, dir)
	if third.Shared() {
		t.Fatal("third shared a stopped server")
	}
	nc3 := connect(t, third)
	defer nc3.Close()
	js3, _ := jetstream.New(nc3)
	if _, err := js3.Stream(ctx, "S"); err != nil {
		t.Errorf("stream after restart: %v", err)
	}
}

func TestStaleURLReplaced(t *testing.T) {
	t.Parallel()
	for name, stale := range map[string]func(t *testing.T) string{
		"nothing listening": func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			return "nats://" + addr
		},
		"not a NATS server": func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			// Cleanups run last-in first-out: close, then wait.
			var wg sync.WaitGroup
			t.Cleanup(wg.Wait)
			t.Cleanup(func() { l.Close() })
			wg.Go(func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
					c.Close()
				}
			})
			return "nats://" + l.Addr().String()
		},
		"garbage": func(*testing.T) string { return "::not a url" },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			old := stale(t)
			if err := os.WriteFile(filepath.Join(dir, embedded.URLFile), []byte(old+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			s := start(t, dir)
			if s.Shared() || s.URL() == old {
				t.Fatalf("stale URL %q was used", old)
			}
			if u, _ := readURL(t, dir); u != s.URL() {
				t.Errorf("nats.url = %q, want %q", u, s.URL())
			}
		})
	}
}

func TestShutdownKeepsOthersURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, dir)
	// Someone else took the store over meanwhile.
	other := "nats://127.0.0.1:1"
	if err := os.WriteFile(filepath.Join(dir, embedded.URLFile), []byte(other+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if u, ok := readURL(t, dir); !ok || u != other {
		t.Errorf("nats.url = %q, %v; want %q kept", u, ok, other)
	}
}

func TestConcurrentStartsShareOneServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	servers := make([]*embedded.Server, 3)
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i], errs[i] = embedded.Start(context.Background(), embedded.Config{StoreDir: dir}) })
	}
	wg.Wait()
	owners := 0
	for i, s := range servers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !s.Shared() {
			owners++
		}
		if s.URL() != servers[0].URL() {
			t.Errorf("URLs differ: %q vs %q", s.URL(), servers[0].URL())
		}
	}
	for _, s := range servers {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if owners != 1 {
		t.Errorf("%d processes started a server, want 1", owners)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	if _, err := embedded.Start(context.Background(), embedded.Config{}); err == nil {
		t.Error("no store dir accepted")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Start(context.Background(), embedded.Config{StoreDir: file}); err == nil {
		t.Error("a file as store dir accepted")
	}
}
