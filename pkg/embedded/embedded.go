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
	// ServerIDFile holds the ID of the server named by URLFile; a listener
	// on that URL with another ID is not the store's server.
	ServerIDFile = "nats.server-id"
	// NkeyFile holds the nkey seed of the store's user: the only client
	// identity the embedded server accepts (`nats --nkey <store>/nats.nk`).
	NkeyFile = "nats.nk"
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
	id     string
	store  string
	nkey   string         // absolute path of the seed file
	srv    *server.Server // nil when shared
	log    *slog.Logger
	once   sync.Once
	errShd error
}

// Start returns the store's NATS server. If <store>/nats.url names a live
// NATS server whose ID is the one recorded in <store>/nats.server-id, the
// handle only reports it ([Server.Shared] is true). Otherwise (no server,
// or a foreign listener on a stale URL) Start runs an in-process
// nats-server with JetStream storing under <store>/jetstream, listening on
// 127.0.0.1 on a free port, and writes its URL and ID to the store
// (atomically). A file lock on <store>/nats.lock, held during start-up only,
// keeps two processes from both starting one.
//
// The server accepts only the store's user, an nkey whose seed is generated
// on first use in <store>/nats.nk: no secret crosses the wire, and clients
// without the seed are refused. The store directory is made (or tightened
// to) mode 0700 and its files 0600.
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
	store, err := filepath.Abs(cfg.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("embedded: store: %w", err)
	}
	if err := secureDir(store); err != nil {
		return nil, err
	}
	unlock, err := lock(ctx, filepath.Join(store, LockFile))
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, name := range []string{URLFile, ServerIDFile, LockFile} {
		if err := tighten(filepath.Join(store, name)); err != nil {
			return nil, err
		}
	}
	seedPath := filepath.Join(store, NkeyFile)
	user, err := loadOrCreateUser(seedPath)
	if err != nil {
		return nil, err
	}

	urlPath := filepath.Join(store, URLFile)
	idPath := filepath.Join(store, ServerIDFile)
	if b, err := os.ReadFile(urlPath); err == nil {
		u := strings.TrimSpace(string(b))
		idb, _ := os.ReadFile(idPath)
		id := strings.TrimSpace(string(idb))
		got, ok := probeID(ctx, u, probe)
		if ok && id != "" && got == id {
			log.Debug("sharing the store's nats server", "url", u, "server_id", id)
			return &Server{url: u, id: id, store: store, nkey: seedPath, log: log}, nil
		}
		if ok {
			log.Warn("nats.url names a server that is not the store's; starting a new one", "url", u, "server_id", got, "want", id)
		} else {
			log.Debug("stale nats.url replaced", "url", u)
		}
	}

	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  filepath.Join(store, JetStreamDir),
		NoSigs:    true,
		// Only the store's user: anonymous clients are refused.
		Nkeys: []*server.NkeyUser{{Nkey: user}},
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
	s := &Server{url: srv.ClientURL(), id: srv.ID(), store: store, nkey: seedPath, srv: srv, log: log}
	// The ID first: a reader that sees the new URL must see its ID.
	for _, f := range []struct{ path, data string }{{idPath, s.id}, {urlPath, s.url}} {
		if err := writeAtomic(f.path, []byte(f.data+"\n")); err != nil {
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, fmt.Errorf("embedded: write %s: %w", filepath.Base(f.path), err)
		}
	}
	log.Debug("started nats server", "url", s.url, "store", opts.StoreDir)
	return s, nil
}

// URL returns the server's client URL (nats://127.0.0.1:<port>).
func (s *Server) URL() string { return s.url }

// ServerID returns the server's ID, as recorded in the store. A client
// checks it after connecting (natsjs.ConnectOptions.ExpectServerID): a
// listener with another ID is not the store's server.
func (s *Server) ServerID() string { return s.id }

// NkeySeedFile returns the absolute path of the seed file of the store's
// user, the credential clients need (nats.go: nats.NkeyOptionFromSeed; the
// nats CLI: --nkey).
func (s *Server) NkeySeedFile() string { return s.nkey }

// StoreDir returns the absolute path of the store directory.
func (s *Server) StoreDir() string { return s.store }

// Addr returns the host and port the server listens on.
func (s *Server) Addr() string {
	u, err := url.Parse(s.url)
	if err != nil {
		return ""
	}
	return u.Host
}

// CLIOptions returns the `nats` CLI options that reach this server as the
// store's user, whatever context the CLI has selected:
// --server <URL> --nkey <absolute seed path> --no-context.
func (s *Server) CLIOptions() []string {
	return []string{"--server", s.url, "--nkey", s.nkey, "--no-context"}
}

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
				if err := os.Remove(filepath.Join(s.store, ServerIDFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("embedded: remove %s: %w", ServerIDFile, err))
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

// probeID returns the ID of the NATS server with JetStream at rawURL, and
// whether one answered within timeout. It reads the server's INFO greeting
// over TCP.
func probeID(ctx context.Context, rawURL string, timeout time.Duration) (string, bool) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "nats" || u.Host == "" {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return "", false
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	line, err := bufio.NewReaderSize(conn, 4096).ReadString('\n')
	if err != nil {
		return "", false
	}
	info, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok {
		return "", false
	}
	var greeting struct {
		ServerID  string `json:"server_id"`
		JetStream bool   `json:"jetstream"`
	}
	if json.Unmarshal([]byte(info), &greeting) != nil || !greeting.JetStream {
		return "", false
	}
	return greeting.ServerID, true
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
