package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/natsjs"
)

// clusterNode is one nats-server process of a test cluster started from
// deploy/nats/cluster/node<n>.conf.
type clusterNode struct {
	*proctest.Process
	name string // server_name
	url  string // client URL, no user
}

// testCluster is the 3-node cluster of deploy/nats/cluster/ on loopback,
// as nats-server processes, with the configurations' ports replaced by
// free ones and their stores under the test's temporary directory.
type testCluster struct {
	nodes []*clusterNode
}

// startCluster starts the three nodes of deploy/nats/cluster/ and waits
// until JetStream answers through node 1. It sets the environment the
// configurations read (OFFLOAD_ROUTE_PASSWORD, OFFLOAD_NATS_ROUTES), so
// its test may not be parallel.
func startCluster(t *testing.T, natsServer string) *testCluster {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "cluster"), 0o700); err != nil {
		t.Fatal(err)
	}
	auth, err := os.ReadFile("nats/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), auth, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OFFLOAD_ROUTE_PASSWORD", routePassword)
	// Parsed once with the default routes, to learn the ports to replace.
	t.Setenv("OFFLOAD_NATS_ROUTES", "[]")
	var routes []string
	c := &testCluster{}
	paths := make([]string, 3)
	for i := range 3 {
		src := fmt.Sprintf("nats/cluster/node%d.conf", i+1)
		opts, err := server.ProcessConfigFile(src)
		if err != nil {
			t.Fatal(err)
		}
		text, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		conf := string(text)
		replace := func(what string, port int) int {
			old := "127.0.0.1:" + strconv.Itoa(port)
			if !strings.Contains(conf, old) {
				t.Fatalf("%s: no %s (%s)", src, old, what)
			}
			free := proctest.FreePort(t)
			conf = strings.ReplaceAll(conf, old, "127.0.0.1:"+strconv.Itoa(free))
			return free
		}
		client := replace("listen", opts.Port)
		replace("http", opts.HTTPPort)
		route := replace("cluster listen", opts.Cluster.Port)
		store := filepath.Join(dir, "store", opts.ServerName)
		if !strings.Contains(conf, `"`+opts.StoreDir+`"`) {
			t.Fatalf("%s: store_dir %q not found as written", src, opts.StoreDir)
		}
		conf = strings.ReplaceAll(conf, `"`+opts.StoreDir+`"`, strconv.Quote(store))
		paths[i] = filepath.Join(dir, "cluster", filepath.Base(src))
		if err := os.WriteFile(paths[i], []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		routes = append(routes, fmt.Sprintf("nats-route://route:%s@127.0.0.1:%d", routePassword, route))
		c.nodes = append(c.nodes, &clusterNode{name: opts.ServerName, url: "nats://127.0.0.1:" + strconv.Itoa(client)})
	}
	// As cluster.sh does: every node gets the three route URLs.
	t.Setenv("OFFLOAD_NATS_ROUTES", "["+strings.Join(routes, ", ")+"]")
	for i, n := range c.nodes {
		n.Process = proctest.StartProcess(t, natsServer, "-c", paths[i])
	}
	for _, n := range c.nodes {
		n.WaitLog(t, "Server is ready", time.Minute)
	}
	// JetStream answers once the meta group has a leader.
	js := c.js(t, "admin", 0)
	// No signal reaches a client for a meta leader elected: polled.
	offloadtest.EventuallyWithin(t, time.Minute, "the cluster's JetStream to answer", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err
	})
	return c
}

// list returns the comma-separated client URLs, starting with node first,
// with role's user and password in the first URL (which the others use).
func (c *testCluster) list(role string, first int) string {
	var urls []string
	for i := range c.nodes {
		urls = append(urls, c.nodes[(first+i)%len(c.nodes)].url)
	}
	urls[0] = strings.Replace(urls[0], "nats://", "nats://"+role+":"+password(role)+"@", 1)
	return strings.Join(urls, ",")
}

// conn connects as role through natsjs.Connect with the list starting at
// node first; closed when the test ends.
func (c *testCluster) conn(t *testing.T, role string, first int) *nats.Conn {
	t.Helper()
	nc, err := natsjs.Connect(c.list(role, first), natsjs.ConnectOptions{
		Name: "cluster test " + role, ReconnectWait: 50 * time.Millisecond, InboxPrefix: inboxPrefix(role),
		Extra: []nats.Option{nats.DontRandomize()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (c *testCluster) js(t *testing.T, role string, first int) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.conn(t, role, first))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// streamLeader returns the stream's leader and its number of current
// replicas besides the leader; "" while it has none.
func streamLeader(ctx context.Context, js jetstream.JetStream, name string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return "", 0, err
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return "", 0, nil
	}
	current := 0
	for _, p := range info.Cluster.Replicas {
		if p.Current && !p.Offline {
			current++
		}
	}
	return info.Cluster.Leader, current, nil
}

// moveLeader makes node the leader of the stream (or of its consumer when
// consumer is set) with a step-down naming it as preferred, and waits
// until it is.
func moveLeader(t *testing.T, nc *nats.Conn, js jetstream.JetStream, stream, consumer, node string) {
	t.Helper()
	subj := "$JS.API.STREAM.LEADER.STEPDOWN." + stream
	what := "stream " + stream
	if consumer != "" {
		subj = "$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + "." + consumer
		what = "consumer " + consumer
	}
	leader := func() string {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if consumer != "" {
			c, err := js.Consumer(ctx, stream, consumer)
			if err != nil || c.CachedInfo().Cluster == nil {
				return ""
			}
			return c.CachedInfo().Cluster.Leader
		}
		l, _, _ := streamLeader(ctx, js, stream)
		return l
	}
	deadline := time.Now().Add(30 * time.Second)
	for leader() != node {
		if time.Now().After(deadline) {
			t.Fatalf("%s: leader %q, could not move it to %s", what, leader(), node)
		}
		if _, err := nc.Request(subj, []byte(`{"placement":{"preferred":"`+node+`"}}`), 5*time.Second); err != nil {
			t.Logf("%s step-down: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond) // the election takes a moment; polled above
	}
}

// awaitNewLeader polls the stream until a node other than old leads it
// (no signal reaches a client for that) and returns how long it took.
func awaitNewLeader(ctx context.Context, js jetstream.JetStream, stream, old string) time.Duration {
	start := time.Now()
	for ctx.Err() == nil {
		if l, _, err := streamLeader(ctx, js, stream); err == nil && l != "" && l != old {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}
