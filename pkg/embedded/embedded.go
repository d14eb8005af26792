package embedded

import (
	"context"
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
	// LockFile is locked (flock, exclusive) by the process that runs the
	// store's server, for the server's whole lifetime: a process that can
	// take it knows that no server of this store runs (the kernel drops
	// the lock of a process that dies, even by SIGKILL), and one that
	// cannot knows that the server named by URLFile is alive and holds
	// its port, so that no other listener can be there.
	LockFile = "nats.lock"
	// StartLockFile serialises start-up, shutdown and the checks of
	// LockFile between processes, so that URLFile is never read while
	// another process is replacing it.
	StartLockFile = "nats.start.lock"
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
	// ReadyTimeout bounds the wait for a started server to accept
	// connections. Defaults to 10s.
	ReadyTimeout time.Duration
}

// Server is a handle on the store's NATS server: either one started by this
// process, or one started by another process (Shared).
type Server struct {
	url     string
	id      string
	store   string
	nkey    string         // absolute path of the seed file
	srv     *server.Server // nil when shared
	owner   func()         // releases LockFile; set when not shared
	taskKey []byte         // see TaskKey
	log     *slog.Logger
	once    sync.Once
	errShd  error
}

// Start returns the store's NATS server. A process that can take the
// exclusive lock on <store>/nats.lock knows that no server of this store
// runs: it ignores whatever <store>/nats.url says, runs an in-process
// nats-server with JetStream storing under <store>/jetstream, listening on
// 127.0.0.1 on a free port, writes its URL and ID to the store
// (atomically) and holds the lock until [Server.Shutdown] (or until the
// process dies: the kernel releases it). A process that cannot take it
// shares the server named by nats.url ([Server.Shared] is true): the lock's
// holder runs it and holds its port, so no other listener can be there.
// A lock on <store>/nats.start.lock, held during start-up, shutdown and
// every check of the first lock, keeps two processes from both starting
// one and a reader from seeing a URL being replaced. Nothing in the server's
// greeting (its ID is public) is trusted to tell which server runs.
//
// The server accepts only the store's user, an nkey whose seed is generated
// on first use in <store>/nats.nk: no secret crosses the wire, and clients
// without the seed are refused. The store directory is made (or tightened
// to) mode 0700 and its files 0600, so only the store's owner can take the
// locks.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("%w: StoreDir is required", ErrInvalidConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
	unlock, err := lock(ctx, filepath.Join(store, StartLockFile), syscall.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, name := range []string{URLFile, ServerIDFile, LockFile, StartLockFile} {
		if err := tighten(filepath.Join(store, name)); err != nil {
			return nil, err
		}
	}
	seedPath := filepath.Join(store, NkeyFile)
	user, key, err := loadOrCreateUser(seedPath)
	if err != nil {
		return nil, err
	}

	urlPath := filepath.Join(store, URLFile)
	idPath := filepath.Join(store, ServerIDFile)
	owner, held, err := tryLock(filepath.Join(store, LockFile), syscall.LOCK_EX)
	if err != nil {
		return nil, err
	}
	if held {
		// The lock's holder runs the store's server and wrote its URL
		// while it held the start lock.
		u, id, err := readRecorded(urlPath, idPath)
		if err != nil {
			return nil, err
		}
		log.Debug("sharing the store's nats server", "url", u, "server_id", id)
		return &Server{url: u, id: id, store: store, nkey: seedPath, taskKey: key, log: log}, nil
	}
	if b, err := os.ReadFile(urlPath); err == nil {
		log.Debug("no server of this store runs; nats.url ignored", "url", strings.TrimSpace(string(b)))
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
	fail := func(err error) (*Server, error) {
		owner()
		return nil, err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fail(fmt.Errorf("embedded: new server: %w", err))
	}
	srv.SetLoggerV2(slogAdapter{log}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(ready) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fail(fmt.Errorf("embedded: server not ready within %v", ready))
	}
	s := &Server{url: srv.ClientURL(), id: srv.ID(), store: store, nkey: seedPath, srv: srv, owner: owner, taskKey: key, log: log}
	// The ID first: a reader that sees the new URL must see its ID.
	for _, f := range []struct{ path, data string }{{idPath, s.id}, {urlPath, s.url}} {
		if err := writeAtomic(f.path, []byte(f.data+"\n")); err != nil {
			srv.Shutdown()
			srv.WaitForShutdown()
			return fail(fmt.Errorf("embedded: write %s: %w", filepath.Base(f.path), err))
		}
	}
	log.Debug("started nats server", "url", s.url, "store", opts.StoreDir)
	return s, nil
}

// readRecorded returns the URL and server ID recorded in the store.
func readRecorded(urlPath, idPath string) (u, id string, err error) {
	ub, err := os.ReadFile(urlPath)
	if err != nil {
		return "", "", fmt.Errorf("embedded: the store's server runs but its URL cannot be read: %w", err)
	}
	idb, err := os.ReadFile(idPath)
	if err != nil {
		return "", "", fmt.Errorf("embedded: the store's server runs but its ID cannot be read: %w", err)
	}
	u, id = strings.TrimSpace(string(ub)), strings.TrimSpace(string(idb))
	if pu, err := url.Parse(u); err != nil || pu.Scheme != "nats" || pu.Host == "" || id == "" {
		return "", "", fmt.Errorf("%w: the store's server runs but %s holds %q and %s %q", ErrNotRunning, URLFile, u, ServerIDFile, id)
	}
	return u, id, nil
}

// ErrNotRunning is wrapped by the errors of a dial ([Server.Dial]) or a
// start-up that finds that the store's server it was to use no longer
// runs (or was replaced): whatever listens on its port is not trusted.
var ErrNotRunning = errors.New("embedded: the store's server is not running")

// Dial connects to the server over TCP and then checks, under the store's
// start lock, that the server this handle names still runs: the process
// that started it still holds <store>/nats.lock, and the store still
// records this URL and ID. A listener found on the port after the server
// went (another local user's relay presenting the same, public, server
// ID) is refused with an error wrapping [ErrNotRunning], before anything
// is sent to it. It has the signature of nats.go's CustomDialer: give it
// to every connection to the embedded server (nats.SetCustomDialer), so
// that reconnects are checked too.
//
// The check after the connection is sound: while the lock is held by the
// process that wrote the URL, its server listens on that port, so the
// connection just made reached it.
func (s *Server) Dial(network, address string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial(network, address)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// check reports whether the server this handle names still runs (see
// [Server.Dial]).
func (s *Server) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	unlock, err := lock(ctx, filepath.Join(s.store, StartLockFile), syscall.LOCK_SH)
	if err != nil {
		return err
	}
	defer unlock()
	release, held, err := tryLock(filepath.Join(s.store, LockFile), syscall.LOCK_SH)
	if err != nil {
		return err
	}
	if !held {
		release()
		return fmt.Errorf("%w: no process holds %s (the server at %s went)", ErrNotRunning, LockFile, s.url)
	}
	u, id, err := readRecorded(filepath.Join(s.store, URLFile), filepath.Join(s.store, ServerIDFile))
	if err != nil {
		return err
	}
	if u != s.url || id != s.id {
		return fmt.Errorf("%w: the store's server is now %s (%s), not %s (%s)", ErrNotRunning, u, id, s.url, s.id)
	}
	return nil
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

// TaskKey returns the key with which the store's agents authenticate the
// tasks they dispatch (remote.ClientConfig.TaskKey): derived from the
// store user's seed, so every process of the store's owner has it and no
// one else does. The in-process worker of the embedded default runs an
// approved task only when it carries this key's MAC.
func (s *Server) TaskKey() []byte { return s.taskKey }

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
		unlock, err := lock(ctx, filepath.Join(s.store, StartLockFile), syscall.LOCK_EX)
		if err != nil {
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
		// The server no longer listens (or was given up on): the next
		// process may start one.
		s.owner()
		if unlock != nil {
			unlock()
		}
		s.errShd = errors.Join(errs...)
	})
	return s.errShd
}

// lock takes a flock of kind how (syscall.LOCK_EX or LOCK_SH) on path,
// retrying until ctx is done.
func lock(ctx context.Context, path string, how int) (unlock func(), err error) {
	for {
		unlock, held, err := tryLock(path, how)
		if err != nil {
			return nil, err
		}
		if !held {
			return unlock, nil
		}
		// Another process is starting up or checking; the lock is held
		// only briefly.
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("embedded: lock %s: %w", path, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tryLock takes a flock of kind how on path without waiting: held reports
// that another open file holds a conflicting lock (unlock is nil then).
// The file is opened close-on-exec (as Go opens every file), so no child
// process inherits the lock and outlives its owner with it.
func tryLock(path string, how int) (unlock func(), held bool, err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("embedded: open lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return func() {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			_ = f.Close()
		}, false, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		_ = f.Close()
		return nil, true, nil
	default:
		_ = f.Close()
		return nil, false, fmt.Errorf("embedded: lock %s: %w", path, err)
	}
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
