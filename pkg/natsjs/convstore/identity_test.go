package convstore_test

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A signature binds conversation, task and the whole payload (approval,
// by, channel, digest, …): any of them changed, another key, or no
// signature, and the decision is not verified. The public half verifies
// without being able to sign; a verified decision's by is a quorum's
// identity unless a signed link gave it; with TrustBy every by counts.
func TestIdentities(t *testing.T) {
	t.Parallel()
	serve := &convstore.Identities{Private: ed25519.NewKeyFromSeed([]byte(strings.Repeat("1", ed25519.SeedSize)))}
	pub, _ := serve.Private.Public().(ed25519.PublicKey)
	agent := &convstore.Identities{Public: pub}
	data := []byte(`{"approved":true,"by":"ann","args_digest":"abc","channel":"api"}`)
	sig := serve.Sign("C", "T", data)
	if !strings.HasPrefix(sig, "ed25519:") || !agent.Verify("C", "T", data, sig) || !serve.Verify("C", "T", data, sig) {
		t.Fatalf("signed %q: not verified", sig)
	}
	if s := agent.Sign("C", "T", data); s != "" {
		t.Errorf("the public half signed: %q", s)
	}
	other := serve.Sign("C", "T", []byte(`{"approved":true,"by":"bob","args_digest":"abc","channel":"api"}`))
	for name, c := range map[string]struct {
		ids        *convstore.Identities
		conv, task string
		data       string
		sig        string
	}{
		"unsigned":      {agent, "C", "T", string(data), ""},
		"other by":      {agent, "C", "T", `{"approved":true,"by":"bob","args_digest":"abc","channel":"api"}`, sig},
		"other channel": {agent, "C", "T", `{"approved":true,"by":"ann","args_digest":"abc","channel":"inbox"}`, sig},
		"other digest":  {agent, "C", "T", `{"approved":true,"by":"ann","args_digest":"abd","channel":"api"}`, sig},
		"denied":        {agent, "C", "T", `{"approved":false,"by":"ann","args_digest":"abc","channel":"api"}`, sig},
		"other task":    {agent, "C", "U", string(data), sig},
		"other conv":    {agent, "D", "T", string(data), sig},
		"another's sig": {agent, "C", "T", string(data), other},
		"other key":     {&convstore.Identities{Private: ed25519.NewKeyFromSeed([]byte(strings.Repeat("2", ed25519.SeedSize)))}, "C", "T", string(data), sig},
		"no key":        {&convstore.Identities{}, "C", "T", string(data), sig},
		"nil":           {nil, "C", "T", string(data), sig},
		"hmac-like":     {agent, "C", "T", string(data), "0123abcd"},
	} {
		if c.ids.Verify(c.conv, c.task, []byte(c.data), c.sig) {
			t.Errorf("%s: verified", name)
		}
	}
	d := protocol.Decision{Approved: true, By: "ann", Channel: protocol.ChannelAPI}
	if by, ok := agent.Identify(d, true); !ok || by != "ann" {
		t.Errorf("verified: %q %v", by, ok)
	}
	if by, ok := agent.Identify(d, false); ok {
		t.Errorf("unverified identified as %q", by)
	}
	link := d
	link.Channel = protocol.ChannelLink
	if by, ok := agent.Identify(link, true); ok {
		t.Errorf("a link's decision identified as %q", by)
	}
	if by, ok := (&convstore.Identities{TrustBy: true}).Identify(protocol.Decision{Approved: true, By: "bob"}, false); !ok || by != "bob" {
		t.Errorf("trusted: %q %v", by, ok)
	}
	// A vote's key: the same for every approval of one identity, another
	// for another, and not the by itself (a raw approver cannot squat it).
	if a, b := serve.VoteKey("C", "T", "ann"), serve.VoteKey("C", "T", "ann"); a != b || strings.Contains(a, "ann") || a == serve.VoteKey("C", "T", "bob") {
		t.Errorf("vote keys %q %q", a, b)
	}
	if k := (&convstore.Identities{TrustBy: true}).VoteKey("C", "T", "ann"); k != "by.ann" {
		t.Errorf("unsigned vote key %q", k)
	}
}

// An answer's signature (SPEC §21) binds its conversation, task and
// whole payload (by, channel) as a decision's does, and is of its kind:
// a decision's signature of the same bytes is not an answer's, nor the
// reverse.
func TestAnswerSignatures(t *testing.T) {
	t.Parallel()
	serve := &convstore.Identities{Private: ed25519.NewKeyFromSeed([]byte(strings.Repeat("1", ed25519.SeedSize)))}
	pub, _ := serve.Private.Public().(ed25519.PublicKey)
	agent := &convstore.Identities{Public: pub}
	data := []byte(`{"content":"42","by":"bea","channel":"api"}`)
	sig := serve.SignAnswer("C", "T", data)
	if !strings.HasPrefix(sig, "ed25519:") || !agent.VerifyAnswer("C", "T", data, sig) {
		t.Fatalf("signed %q: not verified", sig)
	}
	if s := agent.SignAnswer("C", "T", data); s != "" {
		t.Errorf("the public half signed: %q", s)
	}
	if agent.Verify("C", "T", data, sig) {
		t.Error("an answer's signature verified as a decision's")
	}
	if agent.VerifyAnswer("C", "T", data, serve.Sign("C", "T", data)) {
		t.Error("a decision's signature verified as an answer's")
	}
	for name, c := range map[string]struct{ conv, task, data, sig string }{
		"unsigned":      {"C", "T", string(data), ""},
		"other by":      {"C", "T", `{"content":"42","by":"mallory","channel":"api"}`, sig},
		"other channel": {"C", "T", `{"content":"42","by":"bea","channel":"inbox"}`, sig},
		"other content": {"C", "T", `{"content":"43","by":"bea","channel":"api"}`, sig},
		"other task":    {"C", "U", string(data), sig},
		"other conv":    {"D", "T", string(data), sig},
	} {
		if agent.VerifyAnswer(c.conv, c.task, []byte(c.data), c.sig) {
			t.Errorf("%s: verified", name)
		}
	}
}
