package natsjs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

func TestConnectCredentials(t *testing.T) {
	t.Parallel()
	srv, seedFile := authServer(t)
	once := []nats.Option{nats.RetryOnFailedConnect(false), nats.MaxReconnects(0)}
	withPassword := strings.Replace(srv.URL(), "nats://", "nats://alice:s3cret@", 1)

	for name, tc := range map[string]struct {
		url  string
		opts natsjs.ConnectOptions
	}{
		"password in the URL": {withPassword, natsjs.ConnectOptions{}},
		"nkey file":           {srv.URL(), natsjs.ConnectOptions{Nkey: seedFile}},
		"context":             {"", natsjs.ConnectOptions{Context: &natsjs.NATSContext{URL: srv.URL(), User: "alice", Password: "s3cret"}}},
		"context nkey":        {"", natsjs.ConnectOptions{Context: &natsjs.NATSContext{URL: srv.URL(), Nkey: seedFile}}},
		"expected server":     {srv.URL(), natsjs.ConnectOptions{Nkey: seedFile, ExpectServerID: srv.NATS().ID()}},
	} {
		tc.opts.Extra = once
		nc, err := natsjs.Connect(tc.url, tc.opts)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		nc.Close()
	}

	_, err := natsjs.Connect(srv.URL(), natsjs.ConnectOptions{Extra: once})
	if err == nil {
		t.Error("no credentials: connected")
	}
	bad := strings.Replace(srv.URL(), "nats://", "nats://alice:wrong@", 1)
	_, err = natsjs.Connect(bad, natsjs.ConnectOptions{Extra: once})
	if err == nil || strings.Contains(err.Error(), "wrong") {
		t.Errorf("wrong password: err %v (must not show the password)", err)
	}
	_, err = natsjs.Connect(srv.URL(), natsjs.ConnectOptions{Nkey: seedFile, ExpectServerID: "NOTTHISONE", Extra: once})
	if !errors.Is(err, natsjs.ErrWrongServer) {
		t.Errorf("unexpected server: err %v, want ErrWrongServer", err)
	}
	if _, err := natsjs.Connect(srv.URL(), natsjs.ConnectOptions{Creds: filepath.Join(t.TempDir(), "missing.creds"), Extra: once}); err == nil {
		t.Error("a missing creds file was accepted")
	}
}

func TestLoadContext(t *testing.T) {
	t.Parallel()
	cfg := t.TempDir()
	dir := filepath.Join(cfg, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data := `{"description":"","url":"nats://h:4222","user":"u","password":"p","creds":"/c.creds","nkey":"","inbox_prefix":"_INBOX_ops","jetstream_domain":""}`
	if err := os.WriteFile(filepath.Join(dir, "ops.json"), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "XDG_CONFIG_HOME" {
			return cfg
		}
		return ""
	}
	c, err := natsjs.LoadContext("ops", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.URL != "nats://h:4222" || c.User != "u" || c.Password != "p" || c.Creds != "/c.creds" || c.InboxPrefix != "_INBOX_ops" || c.Name != "ops" {
		t.Errorf("context %+v", c)
	}
	if c2, err := natsjs.LoadContext(filepath.Join(dir, "ops.json"), getenv); err != nil || c2.URL != c.URL {
		t.Errorf("by path: %+v %v", c2, err)
	}
	for _, name := range []string{"missing", "../ops", ""} {
		if _, err := natsjs.LoadContext(name, getenv); !errors.Is(err, natsjs.ErrNoContext) {
			t.Errorf("%q: err %v, want ErrNoContext", name, err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	got := natsjs.RedactURL("nats://a:pw@h1:4222, nats://tok@h2:4222,nats://h3")
	if strings.Contains(got, "pw") || strings.Contains(got, "tok") || !strings.Contains(got, "a:xxxxx@h1") || !strings.Contains(got, "nats://h3") {
		t.Errorf("RedactURL = %q", got)
	}
}

// TestConnectURLList: --nats takes a comma-separated list (SPEC §5.6); a
// user and password given in one URL of the list are used for the others,
// so that a client fails over to a server written without them.
func TestConnectURLList(t *testing.T) {
	t.Parallel()
	users := func(o *server.Options) { o.Users = []*server.User{{Username: "alice", Password: "s3cret"}} }
	a, b := natstest.Start(t, users), natstest.Start(t, users)
	dead := "nats://127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	list := dead + ", " + strings.Replace(a.URL(), "nats://", "nats://alice:s3cret@", 1) + " ,  " + b.URL()
	reconnected := make(chan string, 4)
	nc, err := natsjs.Connect(list, natsjs.ConnectOptions{Extra: []nats.Option{
		nats.DontRandomize(), nats.ReconnectWait(10 * time.Millisecond), nats.Timeout(2 * time.Second),
		nats.ReconnectHandler(func(nc *nats.Conn) { reconnected <- nc.ConnectedUrl() }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.FlushTimeout(5 * time.Second); err != nil || !strings.HasSuffix(nc.ConnectedUrl(), a.URL()[len("nats://"):]) {
		t.Fatalf("connected to %q (flush: %v), want %s", nc.ConnectedUrl(), err, a.URL())
	}
	a.Shutdown()
	select {
	case u := <-reconnected:
		if !strings.HasSuffix(u, b.URL()[len("nats://"):]) {
			t.Fatalf("reconnected to %s, want %s", u, b.URL())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no reconnect to %s (the list's user not used for it?): last error %v", b.URL(), nc.LastError())
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// The inbox prefix of ConnectOptions wins over the context's, which
// applies when the options give none.
func TestConnectInboxPrefix(t *testing.T) {
	t.Parallel()
	srv, seedFile := authServer(t)
	once := []nats.Option{nats.RetryOnFailedConnect(false), nats.MaxReconnects(0)}
	for name, tc := range map[string]struct {
		opts natsjs.ConnectOptions
		want string
	}{
		"default":             {natsjs.ConnectOptions{Nkey: seedFile}, "_INBOX."},
		"option":              {natsjs.ConnectOptions{Nkey: seedFile, InboxPrefix: "_INBOX_worker"}, "_INBOX_worker."},
		"context":             {natsjs.ConnectOptions{Context: &natsjs.NATSContext{Nkey: seedFile, InboxPrefix: "_INBOX_ctx"}}, "_INBOX_ctx."},
		"option over context": {natsjs.ConnectOptions{InboxPrefix: "_INBOX_agent", Context: &natsjs.NATSContext{Nkey: seedFile, InboxPrefix: "_INBOX_ctx"}}, "_INBOX_agent."},
	} {
		tc.opts.Extra = once
		nc, err := natsjs.Connect(srv.URL(), tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if inbox := nc.NewInbox(); !strings.HasPrefix(inbox, tc.want) {
			t.Errorf("%s: inbox %s, want the prefix %s", name, inbox, tc.want)
		}
		nc.Close()
	}
}
