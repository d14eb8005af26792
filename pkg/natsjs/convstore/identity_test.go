package convstore_test

import (
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// A signature binds conversation, task, digest, approval and by: any of
// them changed, or another key, and the identity is not authenticated; a
// link's decision is never signed; with TrustBy every by counts.
func TestIdentities(t *testing.T) {
	t.Parallel()
	ids := &convstore.Identities{Key: []byte("key one")}
	d := protocol.Decision{Approved: true, By: "ann", ArgsDigest: "abc", Channel: protocol.ChannelAPI}
	sig := ids.Sign("C", "T", d)
	if by, ok := ids.Identify("C", "T", d, sig); !ok || by != "ann" {
		t.Fatalf("signed: %q %v", by, ok)
	}
	other := d
	other.By = "bob"
	digest := d
	digest.ArgsDigest = "abd"
	for name, c := range map[string]struct {
		ids        *convstore.Identities
		conv, task string
		d          protocol.Decision
		sig        string
	}{
		"unsigned":     {ids, "C", "T", d, ""},
		"other by":     {ids, "C", "T", other, sig},
		"other digest": {ids, "C", "T", digest, sig},
		"other task":   {ids, "C", "U", d, sig},
		"other conv":   {ids, "D", "T", d, sig},
		"other key":    {&convstore.Identities{Key: []byte("key two")}, "C", "T", d, sig},
		"no key":       {&convstore.Identities{}, "C", "T", d, sig},
		"nil":          {nil, "C", "T", d, sig},
	} {
		if by, ok := c.ids.Identify(c.conv, c.task, c.d, c.sig); ok {
			t.Errorf("%s: authenticated as %q", name, by)
		}
	}
	link := d
	link.Channel = protocol.ChannelLink
	if s := ids.Sign("C", "T", link); s != "" {
		t.Errorf("a link's decision signed: %s", s)
	}
	if by, ok := (&convstore.Identities{TrustBy: true}).Identify("C", "T", other, ""); !ok || by != "bob" {
		t.Errorf("trusted: %q %v", by, ok)
	}
}
