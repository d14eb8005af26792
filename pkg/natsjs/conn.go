package natsjs

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectOptions configures [Connect].
type ConnectOptions struct {
	// Name is the client name shown by the server (e.g. "agent",
	// "toolworker"). Defaults to "offload".
	Name string
	// Logger receives connection events (disconnects, reconnects,
	// asynchronous errors). Defaults to a logger that discards everything.
	Logger *slog.Logger
	// ReconnectWait is the pause between reconnect attempts. Defaults to 2s.
	ReconnectWait time.Duration
	// Creds is a credentials file (JWT and nkey seed), as `nats --creds`.
	Creds string
	// Nkey is an nkey seed file, as `nats --nkey`.
	Nkey string
	// Context is a `nats` CLI context (see [LoadContext]) whose
	// credentials, TLS files and inbox prefix are used; its URL is used when
	// Connect gets none. Creds and Nkey take precedence over the context's
	// credentials.
	Context *NATSContext
	// InboxPrefix replaces the _INBOX prefix of the connection's reply
	// subjects (JetStream API responses, publish acknowledgements), so that
	// a user allowed to subscribe only to its own prefix cannot read
	// another user's replies (deploy/nats/auth.conf gives each role one,
	// _INBOX_<role>). It takes precedence over the context's.
	InboxPrefix string
	// Refusals, when set, records the permissions violations the server
	// reports on the connection (each is also logged, with its fix), so
	// that operations waiting for a reply the server refused can stop at
	// once ([Refusals.Watch]).
	Refusals *Refusals
	// ExpectServerID, when set, is the ID of the only server this
	// connection may use: Connect fails with an error wrapping
	// [ErrWrongServer] when the server it reached has another ID, and a
	// reconnect to another server closes the connection. The embedded
	// default sets it to the ID recorded in its store.
	ExpectServerID string
	// Extra client options, applied after the defaults.
	Extra []nats.Option
}

// RedactURL returns the comma-separated server list urls with any password
// or token replaced by "xxxxx", for messages and logs.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// hasCredentials reports whether opts name credentials of their own (a
// creds or nkey file, a context's user, token, creds or nkey).
func (o ConnectOptions) hasCredentials() bool {
	if o.Creds != "" || o.Nkey != "" {
		return true
	}
	c := o.Context
	return c != nil && (c.Creds != "" || c.Nkey != "" || c.User != "" || c.Token != "")
}

// listUser returns the client option giving the user and password (or
// token) of the first URL of the comma-separated list servers that has
// one, so that the list's other URLs, written without, use it too (nats.go
// uses a URL's own user info first). Nothing when no URL has one.
func listUser(servers string) []nats.Option {
	if !strings.Contains(servers, ",") {
		return nil
	}
	for _, p := range strings.Split(servers, ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if pw, ok := u.User.Password(); ok {
			return []nats.Option{nats.UserInfo(u.User.Username(), pw)}
		}
		return []nats.Option{nats.Token(u.User.Username())}
	}
	return nil
}

// credentialOptions returns the client options of the configured
// credentials.
func (o ConnectOptions) credentialOptions() ([]nats.Option, error) {
	var out []nats.Option
	creds, nkey := o.Creds, o.Nkey
	if c := o.Context; c != nil {
		if creds == "" && nkey == "" {
			creds, nkey = c.Creds, c.Nkey
			if c.User != "" {
				out = append(out, nats.UserInfo(c.User, c.Password))
			}
			if c.Token != "" {
				out = append(out, nats.Token(c.Token))
			}
		}
		if c.Cert != "" || c.Key != "" {
			out = append(out, nats.ClientCert(c.Cert, c.Key))
		}
		if c.CA != "" {
			out = append(out, nats.RootCAs(c.CA))
		}
		if c.InboxPrefix != "" && o.InboxPrefix == "" {
			out = append(out, nats.CustomInboxPrefix(c.InboxPrefix))
		}
	}
	if o.InboxPrefix != "" {
		out = append(out, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if creds != "" {
		if _, err := os.Stat(creds); err != nil {
			return nil, fmt.Errorf("natsjs: credentials file: %w", err)
		}
		out = append(out, nats.UserCredentials(creds))
	}
	if nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return nil, fmt.Errorf("natsjs: nkey seed file %s: %w", nkey, err)
		}
		out = append(out, opt)
	}
	return out, nil
}

// Connect connects to the NATS servers, a comma-separated list of URLs
// (the NATS convention: the servers of a cluster, tried in random order,
// the client failing over between them and to the servers the cluster
// announces), with options fit for long-lived processes: it keeps
// reconnecting forever (MaxReconnects(-1)), also when the server is not up
// yet (RetryOnFailedConnect), and logs connection events. The connection is usable at once; while the server is away,
// publishes are buffered by the client and JetStream calls fail until it is
// back.
//
// Credentials come the usual NATS ways: a user and password (or token) in
// the URL (in a list, the first URL's serve the URLs written without),
// opts.Creds, opts.Nkey, or a `nats` CLI context (opts.Context).
// Errors never show a password from the URL.
func Connect(servers string, opts ConnectOptions) (*nats.Conn, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := opts.Name
	if name == "" {
		name = "offload"
	}
	wait := opts.ReconnectWait
	if wait <= 0 {
		wait = 2 * time.Second
	}
	if servers == "" && opts.Context != nil {
		servers = opts.Context.URL
	}
	// wrongServer closes nc when it reached a server other than the
	// expected one.
	var wrong atomic.Value // the ID of an unexpected server reached, if any
	wrongServer := func(nc *nats.Conn) bool {
		want := opts.ExpectServerID
		if want == "" || nc.ConnectedServerId() == want {
			return false
		}
		wrong.Store(nc.ConnectedServerId())
		log.Error("nats server is not the expected one; closing the connection",
			"url", nc.ConnectedUrlRedacted(), "server_id", nc.ConnectedServerId(), "want", want)
		go nc.Close()
		return true
	}
	creds, err := opts.credentialOptions()
	if err != nil {
		return nil, err
	}
	options := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(wait),
		nats.ConnectHandler(func(nc *nats.Conn) {
			if wrongServer(nc) {
				return
			}
			log.Info("nats connected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			if wrongServer(nc) {
				return
			}
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			// A refusal was told when it came (the error handler below,
			// and the caller's error); told again here, asynchronously,
			// it would land after the program's last line.
			if err := nc.LastError(); err != nil && permissionError(nc, err) == nil {
				log.Warn("nats connection closed", "err", err)
			}
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if pe := permissionError(nc, err); pe != nil {
				pe.Need = opts.Refusals.need()
				log.Error("nats refused an operation", "err", pe.Error())
				opts.Refusals.record(pe)
				return
			}
			if sub != nil {
				log.Error("nats async error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("nats async error", "err", err)
		}),
	}
	options = append(options, creds...)
	if !opts.hasCredentials() {
		options = append(options, listUser(servers)...)
	}
	nc, err := nats.Connect(servers, append(options, opts.Extra...)...)
	if err != nil {
		return nil, fmt.Errorf("natsjs: connect %s: %w", RedactURL(servers), err)
	}
	// The connect handler may have seen (and closed) the wrong server
	// before Connect returns.
	got, _ := wrong.Load().(string)
	if want := opts.ExpectServerID; want != "" && (got != "" || nc.IsConnected() && nc.ConnectedServerId() != want) {
		if got == "" {
			got = nc.ConnectedServerId()
		}
		nc.Close()
		return nil, fmt.Errorf("%w: %s has server ID %s, want %s", ErrWrongServer, RedactURL(servers), got, want)
	}
	return nc, nil
}
