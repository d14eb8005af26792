package natsjs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// TestProvisionNotPermitted: a user who may look streams up but not create
// them gets an error naming the missing stream (SPEC §5.1), not a timeout.
func TestProvisionNotPermitted(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "reader", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.STREAM.INFO.>", "$JS.API.CONSUMER.INFO.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}}
	})
	nc, err := nats.Connect(srv.URL(), nats.UserInfo("reader", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	err = natsjs.Provision(t.Context(), js, natsjs.ProvisionOptions{})
	if !errors.Is(err, natsjs.ErrNotPermitted) || !strings.Contains(err.Error(), "stream KV_tools_conversations is missing") {
		t.Errorf("err = %v, want ErrNotPermitted naming the stream", err)
	}
}

// TestProvisionUpdateNotPermitted: a user who may look streams up but
// not update them, started against a stream of an earlier deployment
// (roll-ups allowed), is told what differs and that an admin runs agent
// provision.
func TestProvisionUpdateNotPermitted(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "admin", Password: "pw"}, {Username: "reader", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.STREAM.INFO.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}}
	})
	admin, err := nats.Connect(srv.URL(), nats.UserInfo("admin", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)
	cfgs, err := natsjs.StreamConfigs(natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	effects := natsjs.NamesFor("").EffectsStream
	for _, c := range cfgs {
		if c.Name == effects {
			c.AllowRollup, c.DenyPurge = true, false // as provisioned before issue 37
		}
		if _, err := ajs.CreateStream(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := nats.Connect(srv.URL(), nats.UserInfo("reader", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	err = natsjs.EnsureStreams(t.Context(), js, natsjs.ProvisionOptions{}, effects)
	if !errors.Is(err, natsjs.ErrNotPermitted) || !strings.Contains(err.Error(), "deny_purge, allow_rollup_hdrs") ||
		!strings.Contains(err.Error(), "an admin runs `agent provision`") {
		t.Errorf("err = %v, want ErrNotPermitted naming the fields and agent provision", err)
	}
}
