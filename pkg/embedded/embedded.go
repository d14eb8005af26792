package embedded

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// File names under the store directory.
const (
	// URLFile holds the URL of the server that owns the store.
	URLFile = "nats.url"
	// LockFile serialises start-up between processes.
	LockFile = "nats.lock"
	// JetStreamDir is where the server stores JetStream data.
	JetStreamDir = "jetstream"
)

// ErrInvalidConfig is wrapped by errors about a bad [Config].
var ErrInvalidConfig = errors.New("embedded: invalid config")

// Config configures [Start].
type Config struct {
	// StoreDir is the agent's store directory. Required; created if absent.
	StoreDir string
	// Logger receives the server's warnings and errors (its notices at debug
	// level). Defaults to a logger that discards everything.
	Logger *slog.Logger
	// ProbeTimeout bounds the check that a server named by nats.url is
	// alive. Defaults to 500ms.
	ProbeTimeout time.Duration
	// ReadyTimeout bounds the wait for a started server to accept
	// connections. Defaults to 10s.
	ReadyTimeout time.Duration
}

// Server is a handle on the store's NATS server: either one started by this
// process, or one started by another process (Shared).
type Server struct {
	url    string
	store  string
	srv    *server.Server // nil when shared
	log    *slog.Logger
	once   sync.Once
	errShd error
}

// Start returns the store's NATS server. If <store>/nats.url names a live
// NATS server, the handle only reports that URL ([Server.Shared] is true).
// Otherwise Start runs an in-process nats-server with JetStream storing
// under <store>/jetstream, listening on 127.0.0.1 on a free port, and writes
// its URL to <store>/nats.url (atomically). A file lock on <store>/nats.lock,
// held during start-up only, keeps two processes from both starting one.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("%w: StoreDir is required", ErrInvalidConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	probe := cfg.ProbeTimeout
	if probe <= 0 {
		probe = 500 * time.Millisecond
	}
	ready := cfg.ReadyTimeout
	if ready <= 0 {
		ready = 10 * time.Second
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: create store: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(cfg.StoreDir, LockFile))
	if err != nil {
		return nil, err
	}
	defer unlock()

	urlPath := filepath.Join(cfg.StoreDir, URLFile)
	if b, err := os.ReadFile(urlPath); err == nil {
		u := strings.TrimSpace(string(b))
		if alive(ctx, u, probe) {
			log.Debug("sharing the store's nats server", "url", u)
			return &Server{url: u, store: cfg.StoreDir, log: log}, nil
		}
		log.Debug("stale nats.url replaced", "url", u)
	}

	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  filepath.Join(cfg.StoreDir, JetStreamDir),
		NoSigs:    true,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: new server: %w", err)
	}
	srv.SetLoggerV2(slogAdapter{log}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(ready) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded: server not ready within %v", ready)
	}
	s := &Server{url: srv.ClientURL(), store: cfg.StoreDir, srv: srv, log: log}
	if err := writeAtomic(urlPath, []byte(s.url+"\n")); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded: write %s: %w", URLFile, err)
	}
	log.Debug("started nats server", "url", s.url, "store", opts.StoreDir)
	return s, nil
}

// URL returns the server's client URL (nats://127.0.0.1:<port>).
func (s *Server) URL() string { return s.url }

// Shared reports whether the server belongs to another process.
func (s *Server) Shared() bool { return s.srv == nil }

// Shutdown stops a server started by this process: it removes nats.url (if
// it still names this server), then shuts the server down and waits for it,
// or for ctx. For a shared server it does nothing. Calling it again returns
// the first call's result.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.Shared() {
		return nil
	}
	s.once.Do(func() {
		var errs []error
		if unlock, err := lock(ctx, filepath.Join(s.store, LockFile)); err != nil {
			errs = append(errs, err)
		} else {
			urlPath := filepath.Join(s.store, URLFile)
			if b, err := os.ReadFile(urlPath); err == nil && strings.TrimSpace(string(b)) == s.url {
				if err := os.Remove(urlPath); err != nil {
					errs = append(errs, fmt.Errorf("embedded: remove %s: %w", URLFile, err))
				}
			}
			unlock()
		}
		done := make(chan struct{})
		go func() {
			s.srv.Shutdown()
			s.srv.WaitForShutdown()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("embedded: shutdown: %w", context.Cause(ctx)))
		}
		s.errShd = errors.Join(errs...)
	})
	return s.errShd
}

// lock takes an exclusive flock on path, retrying until ctx is done.
func lock(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded: open lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("embedded: lock %s: %w", path, err)
		}
		// Another process is starting up; the lock is held only briefly.
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("embedded: lock %s: %w", path, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// alive reports whether rawURL names a NATS server with JetStream that
// answers within timeout. It reads the server's INFO greeting over TCP.
func alive(ctx context.Context, rawURL string, timeout time.Duration) bool {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "nats" || u.Host == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return false
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	line, err := bufio.NewReaderSize(conn, 4096).ReadString('\n')
	if err != nil {
		return false
	}
	info, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok {
		return false
	}
	var greeting struct {
		JetStream bool `json:"jetstream"`
	}
	return json.Unmarshal([]byte(info), &greeting) == nil && greeting.JetStream
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o600)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// slogAdapter routes the server's log to slog; notices (start-up banners)
// go to debug level.
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) {
	a.log.Debug("nats-server: " + fmt.Sprintf(format, v...))
}
func (a slogAdapter) Warnf(format string, v ...any) {
	a.log.Warn("nats-server: " + fmt.Sprintf(format, v...))
}
func (a slogAdapter) Fatalf(format string, v ...any) {
	a.log.Error("nats-server: " + fmt.Sprintf(format, v...))
}
func (a slogAdapter) Errorf(format string, v ...any) {
	a.log.Error("nats-server: " + fmt.Sprintf(format, v...))
}
func (a slogAdapter) Debugf(format string, v ...any) {
	a.log.Debug("nats-server: " + fmt.Sprintf(format, v...))
}
func (a slogAdapter) Tracef(format string, v ...any) {
	a.log.Debug("nats-server: " + fmt.Sprintf(format, v...))
}
