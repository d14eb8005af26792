package protocol_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/offload-dev/offload/pkg/protocol"
)

// TestArgsDigest: the digest is that of the canonical JSON (keys sorted at
// every level, no whitespace, no HTML escaping), so two spellings of the
// same arguments have one digest; the expected values were computed
// outside Go (Python's json.dumps(sort_keys=True, separators=(",", ":"),
// ensure_ascii=False) and hashlib.sha256).
func TestArgsDigest(t *testing.T) {
	t.Parallel()
	const want = "d3ead5a3c850d1ad84b118fee44eb5b5bb6270f3e354b2719ac9b806f8fb0abe"
	for _, args := range []string{
		`{"b":1,"a":{"y":[1,2.5],"x":"<&>é"}}`,
		"{\n  \"a\": {\"x\": \"<&>\\u00e9\", \"y\": [1, 2.5]},\n  \"b\": 1\n}",
	} {
		got, err := protocol.ArgsDigest(json.RawMessage(args))
		if err != nil || got != want {
			t.Errorf("ArgsDigest(%s) = %s, %v; want %s", args, got, err, want)
		}
	}
	const empty = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" // sha256("{}")
	for _, args := range []string{"", "null", "{}", " { } "} {
		if got, err := protocol.ArgsDigest(json.RawMessage(args)); err != nil || got != empty {
			t.Errorf("ArgsDigest(%q) = %s, %v; want that of {}", args, got, err)
		}
	}
	if got, _ := protocol.ArgsDigest(json.RawMessage(`{"a":2}`)); got == want || !protocol.ValidDigest(got) {
		t.Errorf("other arguments: digest %s", got)
	}
	if _, err := protocol.ArgsDigest(json.RawMessage(`{"a":`)); err == nil {
		t.Error("invalid JSON has a digest")
	}
}

// TestDecodeArgsDigest: a decision's and an announcement's args_digest is
// 64 lowercase hex digits, or absent.
func TestDecodeArgsDigest(t *testing.T) {
	t.Parallel()
	const ok = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
	d, err := protocol.DecodeDecision([]byte(`{"approved":true,"args_digest":"`+ok+`"}`), nil)
	if err != nil || d.ArgsDigest != ok {
		t.Fatalf("decision: %+v, %v", d, err)
	}
	for _, bad := range []string{`"ABC"`, `"` + ok[:63] + `"`, `"` + ok[:63] + `G"`, `7`} {
		_, err := protocol.DecodeDecision([]byte(`{"approved":true,"args_digest":`+bad+`}`), nil)
		if !errors.Is(err, protocol.ErrInvalidField) {
			t.Errorf("args_digest %s: %v, want ErrInvalidField", bad, err)
		}
	}
	a, err := protocol.DecodeApproval([]byte(`{"task_id":"01J00000000000000000000001","tool":"shell","args":{},"conversation_id":"01J00000000000000000000000","args_digest":"`+ok+`"}`), nil)
	if err != nil || a.ArgsDigest != ok {
		t.Fatalf("approval: %+v, %v", a, err)
	}
}

// TestDecodeChannel: a decision's channel is one of inbox, api, link, cli,
// nats, agui, mcp and a2a, or absent.
func TestDecodeChannel(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"inbox", "api", "link", "cli", "nats", "agui", "mcp", "a2a"} {
		if d, err := protocol.DecodeDecision([]byte(`{"approved":true,"channel":"`+c+`"}`), nil); err != nil || d.Channel != c {
			t.Errorf("channel %s: %+v, %v", c, d, err)
		}
	}
	if _, err := protocol.DecodeDecision([]byte(`{"approved":true,"channel":"fax"}`), nil); !errors.Is(err, protocol.ErrInvalidField) {
		t.Errorf("channel fax: %v, want ErrInvalidField", err)
	}
}
