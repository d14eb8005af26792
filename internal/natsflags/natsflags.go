// Package natsflags is the one definition of the NATS connection flags of
// offload's binaries (SPEC §5.6, §6): --nats, --creds, --nkey, --context,
// --inbox-prefix and --replicas, with their environment variables, and
// the connection options they give.
package natsflags

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/offload-dev/offload/pkg/natsjs"
)

// ReplicasEnv is the environment variable of --replicas.
const ReplicasEnv = "OFFLOAD_REPLICAS"

// Flags are the values of the connection flags.
type Flags struct {
	// URL is --nats: a server URL or a comma-separated list of a
	// cluster's (env NATS_URL).
	URL string
	// Creds, Nkey and Context are --creds (env NATS_CREDS), --nkey (env
	// NATS_NKEY) and --context: the usual NATS ways to give credentials
	// (a user and password in the URL work too).
	Creds, Nkey, Context string
	// InboxPrefix is --inbox-prefix (env NATS_INBOX_PREFIX).
	InboxPrefix string
	// Replicas is --replicas (env OFFLOAD_REPLICAS): the replication
	// factor of what the binary creates.
	Replicas int

	urlSet  func() bool // whether --nats (or NATS_URL) was given
	urlFlag func() bool // whether --nats was given on the command line
	envErr  error       // a bad OFFLOAD_REPLICAS
}

// Register registers the flags on fl: --nats with default natsDefault and
// usage natsUsage (the binaries' defaults differ), the others the same for
// both. getenv gives the environment variables' values.
func (f *Flags) Register(fl *pflag.FlagSet, getenv func(string) string, natsDefault, natsUsage string) {
	fl.StringVar(&f.URL, "nats", natsDefault, natsUsage)
	f.urlSet = func() bool { return fl.Changed("nats") || getenv("NATS_URL") != "" }
	f.urlFlag = func() bool { return fl.Changed("nats") }
	fl.StringVar(&f.Creds, "creds", getenv("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	fl.StringVar(&f.Nkey, "nkey", getenv("NATS_NKEY"), "NATS nkey seed file (env NATS_NKEY)")
	fl.StringVar(&f.Context, "context", "", "nats CLI context (name or JSON file) giving the server and credentials")
	fl.StringVar(&f.InboxPrefix, "inbox-prefix", getenv("NATS_INBOX_PREFIX"), "prefix of the connection's reply subjects instead of _INBOX (env NATS_INBOX_PREFIX; deploy/nats/auth.conf gives each role its own: _INBOX_agent, _INBOX_worker, _INBOX_approver, …)")
	def := 0
	if v := getenv(ReplicasEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			f.envErr = fmt.Errorf("%s=%q: want a replica count (0 or more)", ReplicasEnv, v)
		}
		def = n
	}
	fl.IntVar(&f.Replicas, "replicas", def, "replicas of every stream and bucket created (env "+ReplicasEnv+"; default: the definitions', 1); when given, existing ones must have as many")
}

// Options checks the flags and returns the connection options they give:
// the credentials, the inbox prefix and the --context, read with getenv
// (see natsjs.LoadContext). Its errors are usage errors.
func (f *Flags) Options(getenv func(string) string) (natsjs.ConnectOptions, error) {
	o := natsjs.ConnectOptions{Creds: f.Creds, Nkey: f.Nkey, InboxPrefix: f.InboxPrefix}
	if f.envErr != nil {
		return o, f.envErr
	}
	if f.Replicas < 0 {
		return o, errors.New("--replicas must not be negative")
	}
	if f.Context != "" {
		nctx, err := natsjs.LoadContext(f.Context, getenv)
		if err != nil {
			return o, fmt.Errorf("--context: %w", err)
		}
		o.Context = &nctx
	}
	return o, nil
}

// Servers returns the servers to connect to with opts (see [Flags.Options]):
// --nats (or NATS_URL) when given, else the --context's URL when it has
// one, else --nats's default.
func (f *Flags) Servers(opts natsjs.ConnectOptions) string {
	if (f.urlSet == nil || !f.urlSet()) && opts.Context != nil && opts.Context.URL != "" {
		return opts.Context.URL
	}
	return f.URL
}

// ArgvSecretWarning returns a warning when a secret was given on the
// command line (a password or token in --nats), where every local user
// reads it (/proc/<pid>/cmdline, ps); "" otherwise. The flag keeps working:
// the binaries print the warning and go on.
func (f *Flags) ArgvSecretWarning() string {
	if f.urlFlag == nil || !f.urlFlag() {
		return ""
	}
	for p := range strings.SplitSeq(f.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err == nil && u.User != nil {
			return "warning: --nats carries a password or token on the command line, where every local user can read it (ps, /proc/<pid>/cmdline): give the URL in NATS_URL instead, or use --creds, --nkey or --context"
		}
	}
	return ""
}

// ProvisionOptions returns the provisioning options of prefix with the
// flags' replication factor.
func (f *Flags) ProvisionOptions(prefix string) natsjs.ProvisionOptions {
	return natsjs.ProvisionOptions{Prefix: prefix, Replicas: f.Replicas}
}
