package natsjs

import (
	"fmt"
	"log/slog"
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
	// Extra client options, applied after the defaults.
	Extra []nats.Option
}

// Connect connects to the NATS server at url with options fit for long-lived
// processes: it keeps reconnecting forever (MaxReconnects(-1)), also when
// the server is not up yet (RetryOnFailedConnect), and logs connection
// events. The connection is usable at once; while the server is away,
// publishes are buffered by the client and JetStream calls fail until it is
// back.
func Connect(url string, opts ConnectOptions) (*nats.Conn, error) {
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
	options := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(wait),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("nats connected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				log.Warn("nats connection closed", "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("nats async error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("nats async error", "err", err)
		}),
	}
	nc, err := nats.Connect(url, append(options, opts.Extra...)...)
	if err != nil {
		return nil, fmt.Errorf("natsjs: connect %s: %w", url, err)
	}
	return nc, nil
}
