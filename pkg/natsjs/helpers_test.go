package natsjs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// wait bounds every wait on a signal in these tests.
const wait = jstest.Wait

// bundle is what a test of provisioning and connecting starts from
// (setup): an in-process server and a JetStream context of the test's
// own. Servers with users of their own are authServer's and
// limitedServer's.
type bundle struct {
	srv *natstest.Server
	js  jetstream.JetStream
}

// setup starts a server with opts, stopped when the test ends.
func setup(t *testing.T, opts ...natstest.Option) *bundle {
	t.Helper()
	srv := natstest.Start(t, opts...)
	return &bundle{srv: srv, js: srv.JetStream(t)}
}

func byName(t *testing.T, cfgs []jetstream.StreamConfig) map[string]jetstream.StreamConfig {
	t.Helper()
	m := map[string]jetstream.StreamConfig{}
	for _, c := range cfgs {
		m[c.Name] = c
	}
	return m
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// authServer starts a server with a password user and an nkey user; it
// returns the server and the nkey's seed file.
func authServer(t *testing.T) (*natstest.Server, string) {
	t.Helper()
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "alice", Password: "s3cret"}}
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	})
	return srv, seedFile
}

// limitedServer is a server with an admin user and a user "u" of the given
// permissions, its streams provisioned by the admin.
func limitedServer(t *testing.T, perms *server.Permissions) *natstest.Server {
	t.Helper()
	srv := natstest.Start(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "admin", Password: "pw"}, {Username: "u", Password: "pw", Permissions: perms}}
	})
	nc := natstest.Connect(t, srv.URL(), nats.UserInfo("admin", "pw"))
	js, _ := jetstream.New(nc)
	if err := natsjs.Provision(t.Context(), js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	return srv
}
