package protocol_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/protocol"
)

// A tenant is a short name of letters, digits, '.', '_' and '-'; none is
// valid; anything a header, a key or a log line would mangle is refused.
func TestValidateTenant(t *testing.T) {
	for _, ok := range []string{"", "acme", "a", "Acme-Corp_2.eu", strings.Repeat("x", 64)} {
		if err := protocol.ValidateTenant(ok); err != nil {
			t.Errorf("ValidateTenant(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"-acme", ".acme", "ac me", "acme\n", "ac/me", "ac*", "ac>", "acmé", strings.Repeat("x", 65), " "} {
		if err := protocol.ValidateTenant(bad); !errors.Is(err, protocol.ErrInvalidTenant) {
			t.Errorf("ValidateTenant(%q) = %v, want ErrInvalidTenant", bad, err)
		}
	}
}
