package builtin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// addrOf returns the address an httptest server listens on.
func addrOf(srv *httptest.Server) netip.AddrPort {
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

// only is an address policy that allows the servers given, and nothing
// else: an allowed origin and a refused target can both live on loopback.
func only(srvs ...*httptest.Server) builtin.AddrPolicy {
	return func(ap netip.AddrPort) bool {
		for _, s := range srvs {
			if ap == addrOf(s) {
				return true
			}
		}
		return false
	}
}

// target is a server that counts the requests reaching it.
func target(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "secret")
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// lookupTo resolves every name to ip.
func lookupTo(ip string) builtin.Lookup {
	return func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr(ip)}, nil
	}
}

func fetchWith(t *testing.T, cfg builtin.Config) *tool.Tool {
	t.Helper()
	cfg.Root = t.TempDir()
	return toolsFor(t, cfg)["http_fetch"]
}

// TestHTTPFetchRefusesPrivateAddresses: loopback, the cloud metadata
// address, a redirect to loopback and a DNS name resolving to loopback are
// each refused with a short reason, and no request reaches the target.
func TestHTTPFetchRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	tgt, hits := target(t)
	tgtPort := addrOf(tgt).Port()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, tgt.URL+"/", http.StatusFound)
	}))
	t.Cleanup(origin.Close)

	var metadataDials atomic.Int32
	for _, tc := range []struct {
		name string
		cfg  builtin.Config
		url  string
	}{
		{"loopback", builtin.Config{}, tgt.URL + "/"},
		{"localhost name", builtin.Config{HTTPLookup: lookupTo("127.0.0.1")}, "http://localhost:" + itoa(tgtPort) + "/"},
		{"ipv6 loopback", builtin.Config{}, "http://[::1]:" + itoa(tgtPort) + "/"},
		{"ipv4-mapped loopback", builtin.Config{}, "http://[::ffff:127.0.0.1]:" + itoa(tgtPort) + "/"},
		{"unspecified", builtin.Config{}, "http://0.0.0.0:" + itoa(tgtPort) + "/"},
		{"metadata", builtin.Config{}, "http://169.254.169.254/latest/meta-data/"},
		{"private", builtin.Config{}, "http://10.0.0.1/"},
		{"cgnat", builtin.Config{}, "http://100.64.0.1/"},
		{"redirect to loopback", builtin.Config{HTTPAddrPolicy: only(origin)}, origin.URL + "/"},
		{"dns name resolving to loopback", builtin.Config{HTTPLookup: lookupTo("127.0.0.1")}, "http://public.example:" + itoa(tgtPort) + "/"},
		{"dns name resolving to metadata", builtin.Config{HTTPLookup: func(context.Context, string) ([]netip.Addr, error) {
			metadataDials.Add(1)
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
		}}, "http://metadata.example/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t.Context(), t, fetchWith(t, tc.cfg), `{"url":"`+tc.url+`"}`)
			wantFail(t, err, "address not allowed")
			var tf *tool.ToolFailed
			if errors.As(err, &tf) && (strings.Contains(tf.Message, "dial") || strings.Contains(tf.Message, "tcp")) {
				t.Errorf("the model sees the dial error: %q", tf.Message)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the target", n)
	}
	if metadataDials.Load() != 1 {
		t.Errorf("the resolver was asked %d times", metadataDials.Load())
	}
}

// TestHTTPFetchAllowPrivateNetwork: with --allow-private-network loopback is
// reachable, but the denied addresses (the NATS server's port) never are,
// under any loopback spelling.
func TestHTTPFetchAllowPrivateNetwork(t *testing.T) {
	t.Parallel()
	tgt, hits := target(t)
	nats, natsHits := target(t) // stands for the embedded NATS server's port
	natsPort := addrOf(nats).Port()
	fetch := fetchWith(t, builtin.Config{AllowPrivateNetwork: true, DenyAddrs: []netip.AddrPort{addrOf(nats)},
		HTTPLookup: lookupTo("127.0.0.1")})
	out, err := call(t.Context(), t, fetch, `{"url":"`+tgt.URL+`/"}`)
	if err != nil || out.(builtin.HTTPFetchResult).Body != "secret" || hits.Load() != 1 {
		t.Fatalf("allowed fetch: %+v %v", out, err)
	}
	for _, u := range []string{nats.URL, "http://localhost:" + itoa(natsPort), "http://127.0.0.2:" + itoa(natsPort),
		"http://0.0.0.0:" + itoa(natsPort), "http://[::ffff:127.0.0.1]:" + itoa(natsPort)} {
		_, err := call(t.Context(), t, fetch, `{"url":"`+u+`/"}`)
		wantFail(t, err, "address not allowed")
	}
	if n := natsHits.Load(); n != 0 {
		t.Errorf("%d requests reached the denied port", n)
	}
}

// TestHTTPFetchDropsHeaders: hop-by-hop and credential-looking headers
// chosen by the model are not sent.
func TestHTTPFetchDropsHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	b := setupHTTP(t, builtin.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	headers := map[string]string{
		"X-Name": "ok", "Accept": "text/plain",
		"Authorization": "Bearer x", "Cookie": "s=1", "Proxy-Authorization": "x", "X-Api-Key": "k",
		"X-Auth-Token": "t", "Connection": "close", "Transfer-Encoding": "chunked", "Host": "evil",
		"X-Forwarded-For": "1.2.3.4", "upgrade": "h2c",
	}
	raw, _ := json.Marshal(map[string]any{"url": b.srv.URL + "/", "headers": headers})
	out, err := call(t.Context(), t, b.fetch, string(raw))
	if err != nil {
		t.Fatal(err)
	}
	h := offloadtest.WaitOrTimeout(t, got, "the headers the server received")
	if h.Get("X-Name") != "ok" || h.Get("Accept") != "text/plain" {
		t.Errorf("allowed headers lost: %v", h)
	}
	for _, name := range []string{"Authorization", "Cookie", "Proxy-Authorization", "X-Api-Key", "X-Auth-Token", "Upgrade", "X-Forwarded-For"} {
		if h.Get(name) != "" {
			t.Errorf("header %s was sent: %v", name, h)
		}
	}
	if n := len(out.(builtin.HTTPFetchResult).DroppedHeaders); n != 10 {
		t.Errorf("dropped headers %v", out.(builtin.HTTPFetchResult).DroppedHeaders)
	}
}

// TestHTTPFetchBoundsRedirects: a redirect loop stops after
// MaxHTTPRedirects.
func TestHTTPFetchBoundsRedirects(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	b := setupHTTP(t, builtin.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.Redirect(w, r, "/again", http.StatusFound)
	}))
	_, err := call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/"}`)
	wantFail(t, err, "redirects")
	if got := n.Load(); got != builtin.MaxHTTPRedirects+1 {
		t.Errorf("%d requests, want %d", got, builtin.MaxHTTPRedirects+1)
	}
}

// TestHTTPFetchResultFitsThePayload (SPEC §9 "Encoded sizes"): a body
// truncated to the limit still fits a result message once JSON-encoded,
// even when every character needs escaping.
func TestHTTPFetchResultFitsThePayload(t *testing.T) {
	t.Parallel()
	for _, fill := range []string{"a", "<", "\x01", "é"} {
		b := setupHTTP(t, builtin.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat(fill, 2<<20))
		}))
		out, err := call(t.Context(), t, b.fetch, `{"url":"`+b.srv.URL+`/"}`)
		if err != nil {
			t.Fatal(err)
		}
		res := protocol.ResultFromOutcome(out, nil)
		res.TaskID, res.ToolCallID, res.Worker = protocol.NewID(), "call_"+strings.Repeat("x", 64), strings.Repeat("w", 80)
		data, _ := json.Marshal(res)
		if len(data) > protocol.DefaultMaxSize-1024 || !out.(builtin.HTTPFetchResult).Truncated {
			t.Errorf("fill %q: result of %d bytes (max %d), truncated %v", fill, len(data), protocol.DefaultMaxSize-1024, out.(builtin.HTTPFetchResult).Truncated)
		}
		if len(data) < protocol.DefaultMaxSize/2 {
			t.Errorf("fill %q: result of only %d bytes", fill, len(data))
		}
	}
}

func TestPublicAddr(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "1.1.1.1": true, "2606:4700:4700::1111": true, "93.184.216.34": true,
		"127.0.0.1": false, "127.9.9.9": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false,
		"172.31.255.255": false, "192.168.0.1": false, "169.254.169.254": false, "fe80::1": false,
		"fc00::1": false, "fd12:3456::1": false, "100.64.0.1": false, "100.127.255.255": false,
		"224.0.0.1": false, "239.255.255.250": false, "ff02::1": false, "0.0.0.0": false, "::": false,
		"255.255.255.255": false, "0.1.2.3": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false,
		"64:ff9b::7f00:1": false, "64:ff9b::808:808": true, "172.32.0.1": true, "100.128.0.1": true,
	} {
		if got := builtin.PublicAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("PublicAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// TestHTTPFetchRefusesTheDeniedPortOnEveryLocalAddress (issue 30, finding
// 8): with --allow-private-network, a server of this host listening on
// every interface (as a NATS server may) is not reached through the host's
// other addresses either: its port is refused on all of them.
func TestHTTPFetchRefusesTheDeniedPortOnEveryLocalAddress(t *testing.T) {
	t.Parallel()
	var other netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() && p.Addr().Is4() {
			other = p.Addr()
			break
		}
	}
	if !other.IsValid() {
		t.Skip("this host has no IPv4 address but loopback")
	}
	l, err := net.Listen("tcp", "0.0.0.0:0") //nolint:gosec // G102: every interface, as a NATS server may listen: the case under test
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	port := netip.MustParseAddrPort(l.Addr().String()).Port()
	fetch := fetchWith(t, builtin.Config{AllowPrivateNetwork: true,
		DenyAddrs: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}})
	_, err = call(t.Context(), t, fetch, `{"url":"http://`+net.JoinHostPort(other.String(), itoa(port))+`/"}`)
	wantFail(t, err, "address not allowed")
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the denied port through %s", n, other)
	}
}

// TestHTTPFetchRefusesRedirectCredentials (issue 30, finding 8): a
// redirect to a URL with user info is refused (not followed with the
// credentials sent as an Authorization header).
func TestHTTPFetchRefusesRedirectCredentials(t *testing.T) {
	t.Parallel()
	tgt, hits := target(t)
	from := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, strings.Replace(tgt.URL, "http://", "http://user:pw@", 1)+"/", http.StatusFound)
	}))
	t.Cleanup(from.Close)
	fetch := fetchWith(t, builtin.Config{HTTPAddrPolicy: only(from, tgt)})
	_, err := call(t.Context(), t, fetch, `{"url":"`+from.URL+`/"}`)
	wantFail(t, err, "credentials")
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect with credentials was followed (%d requests)", n)
	}
}
