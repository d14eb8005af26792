package web_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/web"
)

// Weak tokens (issue 37): a tokens file took any token of 16 characters,
// "aaaaaaaaaaaaaaaa" included. ParseTokens refuses a token too short, of
// too little entropy (estimated from its characters), a pattern repeated
// or a run of characters in sequence, saying how to make one; tokens
// made with `openssl rand -hex 24`, and the tests' own, pass.
func TestParseTokensRefusesWeakTokens(t *testing.T) {
	for _, weak := range []string{
		"short-token",
		"aaaaaaaaaaaaaaaaaaaaaaaa",
		"1111111122222222",
		"passwordpassword",
		"nope-nope-nope-nope",
		"abcabcabcabcabcabcabc",
		"0123456789abcdef",
		"abcdefghijklmnopqrstuvwxyz",
		"zyxwvutsrqponmlkjihgfedcba",
	} {
		_, err := web.ParseTokens(strings.NewReader("# ops\n" + weak + " viewer val\n"))
		if err == nil || !strings.Contains(err.Error(), "tokens line 2") || !strings.Contains(err.Error(), "openssl rand -hex 24") {
			t.Errorf("%s: %v, want it refused, saying how to make a token", weak, err)
		}
	}
	for _, good := range []string{
		"3f9c2a7be14d08c65e2f91ab7730d4c1e8a95b26f03c7d1e", // openssl rand -hex 24
		"9b1e4f0c2d7a8e63", // openssl rand -hex 8
		"operator-token-0123456789",
		"correct-horse-battery-staple",
	} {
		if _, err := web.ParseTokens(strings.NewReader(good + " viewer val\n")); err != nil {
			t.Errorf("%s: %v, want it taken", good, err)
		}
	}
}

// A token may be bound to a tenant (SPEC §19): a fourth field
// tenant=TENANT; anything else there, or a tenant that is not one, is
// refused with its line.
func TestParseTokensTenant(t *testing.T) {
	toks, err := web.ParseTokens(strings.NewReader("operator-token-0123456789 operator ops\nacme-token-0123456789x operator acmeops tenant=acme\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := toks["acme-token-0123456789x"]; !reflect.DeepEqual(got, web.Identity{Roles: []web.Role{web.RoleOperator}, Name: "acmeops", Tenant: "acme"}) {
		t.Errorf("bound token: %+v", got)
	}
	if got := toks["operator-token-0123456789"]; got.Tenant != "" {
		t.Errorf("unbound token: %+v", got)
	}
	for _, bad := range []string{"acme", "tenant=", "tenant=ac/me", "tenant=acme extra", "team=acme"} {
		if _, err := web.ParseTokens(strings.NewReader("# ops\nacme-token-0123456789x operator acmeops " + bad + "\n")); err == nil || !strings.Contains(err.Error(), "tokens line 2") {
			t.Errorf("%q: %v, want it refused", bad, err)
		}
	}
}

// A token may have several roles (ROLE,ROLE: an MCP or A2A host calls an
// agent and answers its approvals with one token); an unknown role among
// them, or one given twice, is refused with its line.
func TestParseTokensRoles(t *testing.T) {
	toks, err := web.ParseTokens(strings.NewReader("host-token-0123456789xyz operator,approver host\n"))
	if err != nil {
		t.Fatal(err)
	}
	id := toks["host-token-0123456789xyz"]
	if !id.Has(web.RoleOperator) || !id.Has(web.RoleApprover) || id.Has(web.RoleAnswerer) || id.Has(web.RoleAdmin) || id.String() != "operator,approver" {
		t.Errorf("operator,approver: %+v %q", id, id)
	}
	if admin := (web.Identity{Roles: []web.Role{web.RoleAdmin}}); !admin.Has(web.RoleAnswerer) {
		t.Error("admin has every role")
	}
	for _, bad := range []string{"operator,", "operator,approver,operator", "operator,root", ",viewer"} {
		if _, err := web.ParseTokens(strings.NewReader("# hosts\nhost-token-0123456789xyz " + bad + " host\n")); err == nil || !strings.Contains(err.Error(), "tokens line 2") {
			t.Errorf("%q: %v, want it refused", bad, err)
		}
	}
}
