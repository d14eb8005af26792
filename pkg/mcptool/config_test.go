package mcptool_test

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/offload-dev/offload/pkg/mcptool"
)

// limits: of a server entry and of an override are checked as a tool's
// limits are (SPEC §19).
func TestConfigLimits(t *testing.T) {
	for _, tc := range []struct {
		yaml, err string
	}{
		{"limits: {max_in_flight: 1, rate: {limit: 60, period: 1m}}\noverrides: {echo: {limits: {max_in_flight: 4}}}", ""},
		{"limits: {max_in_flight: -1}", "limits: "},
		{"overrides: {echo: {limits: {priority: 9}}}", "overrides: echo: limits: "},
	} {
		var c mcptool.ServerConfig
		if err := yaml.Unmarshal([]byte("name: s\ncommand: [node]\n"+tc.yaml), &c); err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		err := c.Validate()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.yaml, err)
		case tc.err != "" && (!errors.Is(err, mcptool.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.yaml, err, tc.err)
		}
	}
}
