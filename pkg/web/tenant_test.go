package web_test

import (
	"testing"

	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// acmeToken is an operator's token bound to tenant acme.
const acmeToken = "acme-operator-token-0123456789"

// A conversation's tenant over the API (SPEC §19): the request's tenant
// field, or the tenant the token is bound to, is stored with the
// conversation and shown in its view; a tenant that is not one is 400; a
// bound token cannot name another tenant, nor start again or continue a
// conversation of another tenant (403 wrong_tenant), whatever else holds
// it (here its pending call).
func TestAPITenant(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := r.Face(t, opToken+" operator ops\n"+acmeToken+" operator acmeops tenant=acme\n"+viewerToken+" viewer val\n", agentproc.FaceOptions{})
	if code, m := call(t, srv, "POST", "/v1/conversations", opToken, `{"agent":"ops","prompt":"deploy prod","tenant":"ac me"}`); code != 400 || errCode(m) != "bad_request" {
		t.Fatalf("a bad tenant: %d %v", code, m)
	}
	if code, m := call(t, srv, "POST", "/v1/conversations", acmeToken, `{"agent":"ops","prompt":"deploy prod","tenant":"globex"}`); code != 403 || errCode(m) != "wrong_tenant" {
		t.Fatalf("a bound token naming another tenant: %d %v", code, m)
	}
	tenantOf := func(conv string) any {
		t.Helper()
		code, view := call(t, srv, "GET", "/v1/conversations/"+conv, viewerToken, "")
		if code != 200 {
			t.Fatalf("view: %d %v", code, view)
		}
		return view["tenant"]
	}
	start := func(token, body string) string {
		t.Helper()
		code, final := call(t, srv, "POST", "/v1/conversations?wait=1", token, body)
		if code != 200 || final["status"] != "paused" {
			t.Fatalf("start: %d %v", code, final)
		}
		return final["conversation_id"].(string)
	}
	globex := start(opToken, `{"agent":"ops","prompt":"deploy prod","tenant":"globex"}`)
	if got := tenantOf(globex); got != "globex" {
		t.Errorf("the tenant named: %v, want globex", got)
	}
	acme := start(acmeToken, `{"agent":"ops","prompt":"deploy prod"}`)
	if got := tenantOf(acme); got != "acme" {
		t.Errorf("the bound token's: %v, want acme", got)
	}
	if got := tenantOf(start(acmeToken, `{"agent":"ops","prompt":"deploy prod","tenant":"acme"}`)); got != "acme" {
		t.Errorf("the bound token's named: %v, want acme", got)
	}
	none := start(opToken, `{"agent":"ops","prompt":"deploy prod"}`)
	if got := tenantOf(none); got != nil {
		t.Errorf("no tenant: %v", got)
	}
	for _, conv := range []string{globex, none} {
		if code, m := call(t, srv, "POST", "/v1/conversations/"+conv+"/messages", acmeToken, `{"prompt":"more"}`); code != 403 || errCode(m) != "wrong_tenant" {
			t.Errorf("a bound token continuing another tenant's: %d %v", code, m)
		}
		if code, m := call(t, srv, "POST", "/v1/conversations", acmeToken, `{"agent":"ops","prompt":"more","conversation_id":"`+conv+`"}`); code != 403 || errCode(m) != "wrong_tenant" {
			t.Errorf("a bound token starting another tenant's again: %d %v", code, m)
		}
	}
	// Its own tenant's: past the tenant, what holds it answers (pending).
	if code, m := call(t, srv, "POST", "/v1/conversations/"+acme+"/messages", acmeToken, `{"prompt":"more"}`); code != 409 || errCode(m) != "pending" {
		t.Errorf("a bound token continuing its own: %d %v", code, m)
	}
}
