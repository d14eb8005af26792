package agentproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/embedded"
	"github.com/offload-dev/offload/pkg/natsjs"
)

// DialOptions configure [Dial].
type DialOptions struct {
	// URL is the server, or a comma-separated list of a cluster's. Empty
	// (and no Connect.Context): the embedded default (SPEC §6.4).
	URL string
	// Connect are the connection's options (credentials, TLS, a nats CLI
	// context); its Name, Logger and Refusals are set by Dial.
	Connect natsjs.ConnectOptions
	// Name is the connection's name. Defaults to "agent".
	Name string
	// Role is the role of deploy/nats/auth.conf the process needs, named
	// in the fix of a permission refused. Defaults to "agent".
	Role string
	// StoreDir is the embedded server's store.
	StoreDir string
	// Logger receives the connection's and the embedded server's logs.
	Logger *slog.Logger
	// Embedded, if set, is called on the embedded default before the
	// server starts (srv nil) and once it runs; an error from it ends the
	// dial.
	Embedded func(srv *embedded.Server) error
}

// Conn is an agent process's connection: to the server of its URL, or to
// the store's embedded server (started when none ran). [Conn.Close]
// closes it.
type Conn struct {
	// NC is the connection.
	NC *nats.Conn
	// URL is the server's URL.
	URL string
	// Server is the store's server on the embedded default (nil
	// otherwise).
	Server *embedded.Server
	// Refusals are the permission violations the server reported.
	Refusals *natsjs.Refusals
	closers  []func(context.Context)
}

// ErrConnect wraps the failure to connect to a server.
var ErrConnect = errors.New("connect")

// Dial connects to o.URL, or on the embedded default to the store's
// server, starting it when none runs. An agent fails fast when the server
// is not there (workers wait for it).
func Dial(ctx context.Context, o DialOptions) (*Conn, error) {
	if o.Role == "" {
		o.Role = "agent"
	}
	if o.Name == "" {
		o.Name = "agent"
	}
	c := &Conn{URL: o.URL, Refusals: &natsjs.Refusals{Role: o.Role}}
	fail := func(err error) (*Conn, error) {
		c.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	copts := o.Connect
	if c.URL == "" && copts.Context == nil {
		if o.Embedded != nil {
			if err := o.Embedded(nil); err != nil {
				return fail(err)
			}
		}
		srv, err := embedded.Start(ctx, embedded.Config{StoreDir: o.StoreDir, Logger: o.Logger})
		if err != nil {
			return fail(fmt.Errorf("embedded nats-server: %w", err))
		}
		c.closers = append(c.closers, func(ctx context.Context) { _ = srv.Shutdown(ctx) })
		c.URL, c.Server = srv.URL(), srv
		// Only the store's user is accepted, and only the server this
		// store started is used.
		copts = natsjs.ConnectOptions{Nkey: srv.NkeySeedFile(), ExpectServerID: srv.ServerID()}
		if o.Embedded != nil {
			if err := o.Embedded(srv); err != nil {
				return fail(err)
			}
		}
	}
	copts.Name, copts.Logger, copts.Refusals = o.Name, o.Logger, c.Refusals
	copts.Extra = []nats.Option{nats.Timeout(5 * time.Second), nats.RetryOnFailedConnect(false)}
	if c.Server != nil {
		// Every dial, reconnects included, checks that the store's
		// server still runs: a listener on its port after it went is an
		// impostor, whatever server ID it presents.
		copts.Extra = append(copts.Extra, nats.SetCustomDialer(c.Server))
	}
	nc, err := natsjs.Connect(c.URL, copts)
	if err != nil {
		return fail(fmt.Errorf("%w to %s: %w", ErrConnect, natsjs.RedactURL(c.URL), err))
	}
	c.NC = nc
	c.closers = append(c.closers, func(context.Context) { nc.Close() })
	return c, nil
}

// OnClose adds fn to what Close does, before what was there (the
// connection closes after what runs on it stops).
func (c *Conn) OnClose(fn func(context.Context)) { c.closers = append(c.closers, fn) }

// Close stops what runs on the connection, closes it and shuts the
// embedded server down, in reverse order.
func (c *Conn) Close(ctx context.Context) {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i](ctx)
	}
	c.closers = nil
}

// dialLike connects again to the server of nc, with nc's options (its
// servers, credentials, TLS, dialer and handlers: the checks of the
// embedded default's server included), named like nc with suffix.
func dialLike(nc *nats.Conn, suffix string) (*nats.Conn, error) {
	o := nc.Opts // a copy: read only, as nats.Options.Connect takes it
	o.Name = cmp.Or(o.Name, "offload") + suffix
	return o.Connect()
}
