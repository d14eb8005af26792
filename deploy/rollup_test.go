package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/authconf"
)

// wipeExceptions are the streams a role may still roll up or purge, each
// with why (SECURITY.md, "The NATS deployment, against a stolen
// credential"): nats-server lets no stream hold message schedules, nor
// an object store keep its objects, without roll-ups, and the roles that
// write them are the agents and the service, which may rewrite every
// conversation (and each schedule) anyway.
var wipeExceptions = map[string]string{
	names.Expiries:        "message schedules need roll-ups (nats-server refuses allow_msg_schedules without them); agent serve schedules the waiting calls' timeouts again after one (TestExpiryScheduleRolledUp)",
	names.HistoriesStream: "the object store writes its metadata with a roll-up and deletes an object's chunks with a purge",
}

// streamTarget is a stream a role may publish to, and one subject of it
// the role's permissions allow.
type streamTarget struct {
	stream, subject string
}

// publishTargets returns, for each stream of the definitions, a subject of
// it that u's publish permissions allow (none for a stream u may not
// publish to).
func publishTargets(t *testing.T, u authconf.User) []streamTarget {
	t.Helper()
	cfgs, err := natsjs.StreamConfigs(natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []streamTarget
	for _, cfg := range cfgs {
	streams:
		for _, allowed := range u.Permissions.PublishSubjects() {
			if strings.HasPrefix(allowed, "$JS.") {
				continue // API requests, not stream subjects
			}
			for _, subj := range cfg.Subjects {
				if server.SubjectsCollide(allowed, subj) {
					out = append(out, streamTarget{stream: cfg.Name, subject: intersect(allowed, subj)})
					break streams
				}
			}
		}
	}
	return out
}

// intersect returns a literal subject that both a and b (colliding
// subjects with wildcards) match.
func intersect(a, b string) string {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	var out []string
	for i := 0; ; i++ {
		switch {
		case i < len(at) && at[i] == ">" || i >= len(at):
			return strings.Join(append(out, literalTail(bt, i)...), ".")
		case i < len(bt) && bt[i] == ">" || i >= len(bt):
			return strings.Join(append(out, literalTail(at, i)...), ".")
		case at[i] != "*":
			out = append(out, at[i])
		case bt[i] != "*":
			out = append(out, bt[i])
		default:
			out = append(out, "w"+fmt.Sprint(i))
		}
	}
}

// literalTail returns the tokens of t from i on, wildcards made literal
// (at least one token).
func literalTail(t []string, i int) []string {
	var out []string
	for ; i < len(t); i++ {
		if t[i] == "*" || t[i] == ">" {
			out = append(out, "w"+fmt.Sprint(i))
			continue
		}
		out = append(out, t[i])
	}
	if len(out) == 0 {
		out = append(out, "w")
	}
	return out
}

// seedStreams stores, as admin, two messages on two subjects of every
// stream of the definitions (keys of the buckets, objects of the object
// store), so that a roll-up or a purge shows.
func (d *deployServer) seedStreams(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	nc := d.connect(t, "admin", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cfgs, err := natsjs.StreamConfigs(natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		if cfg.Name == names.HistoriesStream {
			obs, err := js.ObjectStore(ctx, historiesBucket)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"seed-1", "seed-2"} {
				if _, err := obs.PutBytes(ctx, name, bytes.Repeat([]byte("h"), 10)); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		for _, tok := range []string{"seed1", "seed2"} {
			subject := strings.ReplaceAll(strings.ReplaceAll(cfg.Subjects[0], ">", tok+".a.b"), "*", tok)
			if _, err := js.Publish(ctx, subject, []byte(`{}`)); err != nil {
				t.Fatalf("seed %s on %s: %v", cfg.Name, subject, err)
			}
		}
	}
}

// storedMsgs returns how many messages stream holds, read as admin.
func (d *deployServer) storedMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	nc := d.connect(t, "admin", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestNoCredentialWipesAStream performs finding 1 of issue 37 against the
// shipped auth.conf and streams: every role's credential, on every stream
// it may publish to, publishes a message with Nats-Rollup: all (a worker's
// on its own ledger key wiped every tool's effect ledger; one on a
// registry key the tool registry; an agent's on an expiry subject every
// scheduled timeout), then asks the server to purge the stream. Each is
// refused (by the stream's configuration, allow_rollup_hdrs false and
// deny_purge true, or by the permissions), and every stream keeps what it
// held; wipeExceptions are the streams the server cannot protect so.
func TestNoCredentialWipesAStream(t *testing.T) {
	t.Parallel()
	for _, u := range authconf.Shipped().Users {
		if u.Permissions == nil {
			continue // admin
		}
		t.Run(u.Name, func(t *testing.T) {
			t.Parallel()
			d := startDeployServer(t)
			d.seedStreams(t)
			targets := publishTargets(t, u)
			if len(targets) == 0 {
				t.Fatalf("%s may publish to no stream", u.Name)
			}
			nc := d.connect(t, u.Name, make(chan error)) // refusals expected: not printed
			defer nc.Close()
			js, _ := jetstream.New(nc)
			for _, tg := range targets {
				if why, ok := wipeExceptions[tg.stream]; ok {
					t.Logf("%s on %s: not checked: %s", u.Name, tg.stream, why)
					continue
				}
				before := d.storedMsgs(t, tg.stream)
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				m := nats.NewMsg(tg.subject)
				m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
				m.Data = []byte(`{}`)
				_, err := js.PublishMsg(ctx, m)
				cancel()
				if err == nil {
					t.Errorf("%s rolled up %s with a message on %s", u.Name, tg.stream, tg.subject)
				}
				// A purge refused by the permissions gets no reply.
				_, perr := nc.Request("$JS.API.STREAM.PURGE."+tg.stream, nil, time.Second)
				if perr != nil && !errors.Is(perr, nats.ErrTimeout) && !errors.Is(perr, nats.ErrNoResponders) {
					t.Errorf("purge of %s as %s: %v", tg.stream, u.Name, perr)
				}
				if after := d.storedMsgs(t, tg.stream); after < before {
					t.Errorf("%s wiped %s (publish on %s: %v): %d messages, then %d", u.Name, tg.stream, tg.subject, err, before, after)
				}
			}
		})
	}
}
