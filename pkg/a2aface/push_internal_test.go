package a2aface

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestPushGuard: the pushes' client refuses a loopback receiver unless
// its network is allowed (at connect time: a name resolving to it too),
// follows no redirect, and a config to a literal address not allowed is
// refused at creation.
func TestPushGuard(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/hook", http.StatusFound)
		}
	}))
	defer srv.Close()
	body := []byte(`{}`)
	closed := &Face{push: newPushes(PushOptions{})}
	local := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	for _, u := range []string{srv.URL + "/hook", local + "/hook"} {
		if err := closed.postPush(t.Context(), &a2a.PushConfig{URL: u}, body); !errors.Is(err, ErrPushAddress) {
			t.Fatalf("%s, nothing allowed: %v", u, err)
		}
	}
	if err := closed.push.checkPush(&a2a.PushConfig{URL: srv.URL}); !errors.Is(err, ErrPushAddress) {
		t.Fatalf("created: %v", err)
	}
	if err := closed.push.checkPush(&a2a.PushConfig{URL: "https://example.com/hook"}); err != nil {
		t.Fatalf("a public name refused: %v", err)
	}
	open := &Face{push: newPushes(PushOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})}
	if err := open.postPush(t.Context(), &a2a.PushConfig{URL: srv.URL + "/hook"}, body); err != nil {
		t.Fatalf("allowed: %v", err)
	}
	if err := open.postPush(t.Context(), &a2a.PushConfig{URL: srv.URL + "/moved"}, body); err == nil || !strings.Contains(err.Error(), "302") {
		t.Fatalf("redirect: %v", err)
	}
	for _, ip := range []string{"10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "::1", "fe80::1", "fd00::1", "0.0.0.0", "::ffff:127.0.0.1"} {
		if allowed(netip.MustParseAddr(ip), nil) {
			t.Fatalf("%s allowed", ip)
		}
	}
	if !allowed(netip.MustParseAddr("93.184.216.34"), nil) {
		t.Fatal("a public address refused")
	}
}
