package agentspec_test

import (
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agentspec"
)

func TestParse(t *testing.T) {
	t.Parallel()
	raw := []byte("name: ops-bot\nmodel: test\ntools: [sleep]\nlimits: {requests: 3}\ncapabilities:\n  - BackgroundTools: {tools: [sleep]}\nexternal_tools:\n  - {name: ask_human, description: Ask.}\n")
	s, err := agentspec.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "ops-bot" || s.Model != "test" || *s.Limits.Requests != 3 || len(s.ExternalDefs()) != 1 || s.ExternalDefs()[0].Name != "ask_human" {
		t.Fatalf("spec %+v", s)
	}
	if sels, err := s.Selectors(); err != nil || len(sels) != 1 {
		t.Fatalf("selectors %v, %v", sels, err)
	}
	again, _ := agentspec.Parse(raw)
	other, _ := agentspec.Parse(append(raw, '\n'))
	if !strings.HasPrefix(s.Digest, "sha256:") || len(s.Digest) != len("sha256:")+64 || again.Digest != s.Digest || other.Digest == s.Digest {
		t.Errorf("digests %q %q %q: want the file's sha256", s.Digest, again.Digest, other.Digest)
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"bogus: 1\n", "bogus"},
		{"name: ops.prod\n", "name: "},
		{"name: \"a b\"\n", "name: "},
		{"approve: maybe\n", `approve: "maybe" is not one of`},
		{"limits: {requests: 0}\n", "limits.requests must be at least 1"},
		{"capabilities: [{BackgroundTools: {tools: some}}]\n", "capabilities[0].BackgroundTools.tools"},
		{"model: test\n---\nmodel: test\n", "more than one YAML document"},
		{"tenant: \"a b\"\n", "tenant: protocol: invalid tenant"},
		{"tenant: acme/eu\n", "tenant: protocol: invalid tenant"},
	} {
		if _, err := agentspec.Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// A spec's tenant (SPEC §19) is kept as given.
func TestParseTenant(t *testing.T) {
	t.Parallel()
	s, err := agentspec.Parse([]byte("name: ops\ntenant: acme-eu\n"))
	if err != nil || s.Tenant != "acme-eu" {
		t.Fatalf("tenant %q, %v", s.Tenant, err)
	}
}

// An agent's summary (SPEC §17, its MCP tool's description): its
// description, else its instructions' first line that says something.
func TestSummary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"name: ops\ndescription: Deploys services.\ninstructions: You deploy.\n", "Deploys services."},
		{"name: ops\ninstructions: \"\\n  You run the fleet.\\nBe careful.\"\n", "You run the fleet."},
		{"name: ops\n", ""},
	} {
		s, err := agentspec.Parse([]byte(tc.yaml))
		if err != nil || s.Summary() != tc.want {
			t.Errorf("%q: summary %q, %v; want %q", tc.yaml, s.Summary(), err, tc.want)
		}
	}
}

// An approval's expiry (SPEC §12): a positive timeout, on_timeout deny,
// approve or fail.
func TestApprovalExpiry(t *testing.T) {
	t.Parallel()
	s, err := agentspec.Parse([]byte("approval: {timeout: 30m, on_timeout: approve, message: late}\n"))
	if err != nil || s.Approval == nil || s.Approval.Timeout != "30m" || s.Approval.Map()["on_timeout"] != "approve" || s.Approval.Map()["message"] != "late" {
		t.Fatalf("spec %+v, %v", s, err)
	}
	s, err = agentspec.Parse([]byte("approval: {timeout: 1m, on_timeout: fail}\n"))
	if err != nil || s.Approval.Map()["on_timeout"] != "fail" {
		t.Fatalf("on_timeout fail: spec %+v, %v", s, err)
	}
	for _, bad := range []string{"{timeout: soon}", "{timeout: -1m}", "{timeout: 1m, on_timeout: maybe}", "{timeout: 1m, nope: 1}"} {
		if _, err := agentspec.Parse([]byte("approval: " + bad + "\n")); err == nil {
			t.Errorf("approval %s accepted", bad)
		}
	}
}

// An approval's quorum (SPEC §12): required N, with or without a timeout,
// reaches serve's policy in the map form.
func TestApprovalQuorum(t *testing.T) {
	t.Parallel()
	s, err := agentspec.Parse([]byte("approval: {required: 2}\n"))
	if err != nil || s.Approval == nil || s.Approval.Required != 2 || s.Approval.Map()["required"] != 2 || s.Approval.Map()["timeout"] != nil {
		t.Fatalf("spec %+v, %v", s, err)
	}
	// A live run's non-blocking calls count a quorum too (session's live
	// waiter): the pair is accepted.
	if s, err := agentspec.Parse([]byte("approve: background\napproval: {required: 2}\n")); err != nil || s.Approval.Required != 2 {
		t.Errorf("a quorum of non-blocking calls: %+v, %v", s, err)
	}
	for _, bad := range []string{"{required: -1}", "{required: 2, timeout: soon}", "{}"} {
		if _, err := agentspec.Parse([]byte("approval: " + bad + "\n")); err == nil {
			t.Errorf("approval %s accepted", bad)
		}
	}
}
