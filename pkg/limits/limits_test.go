package limits_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/offload-dev/offload/pkg/limits"
)

// decode reads a Limits from YAML strictly, as the configs that embed it do.
func decode(t *testing.T, src string) (*limits.Limits, error) {
	t.Helper()
	var l limits.Limits
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&l); err != nil {
		return nil, err
	}
	return &l, l.Validate()
}

func TestLimitsYAML(t *testing.T) {
	t.Parallel()
	l, err := decode(t, `
max_in_flight: 2
key: tenant
rate: {limit: 30, period: 1m, burst: 3}
priority: 1
fairness: {key: tenant, weights: {acme: 2}}
`)
	if err != nil {
		t.Fatal(err)
	}
	if l.MaxInFlight != 2 || l.Key != "tenant" || l.Rate.Limit != 30 || time.Duration(l.Rate.Period) != time.Minute ||
		l.Rate.Burst != 3 || l.Priority != 1 || l.Fairness.Weights["acme"] != 2 {
		t.Errorf("decoded %+v", l)
	}
	if got := l.Rate.Interval(); got != 2*time.Second {
		t.Errorf("interval %v, want 2s", got)
	}
	if got := l.String(); got != "max_in_flight 2 per tenant, rate 30/1m0s burst 3 per tenant, priority 1, fairness by tenant" {
		t.Errorf("String %q", got)
	}
	// JSON, as a registry entry and a task carry them.
	data, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"period":"1m0s"`)) {
		t.Errorf("JSON %s: want the period as a duration string", data)
	}
	var back limits.Limits
	if err := json.Unmarshal(data, &back); err != nil || back.String() != l.String() {
		t.Errorf("JSON round trip: %+v, %v", back, err)
	}
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		`max_in_flight: -1`:                        "max_in_flight -1",
		`rate: {limit: 0, period: 1m}`:             "rate.limit 0",
		`rate: {limit: 1, period: 0s}`:             "rate.period",
		`rate: {limit: 1, period: 1m, burst: -2}`:  "rate.burst -2",
		`priority: 6`:                              "priority 6",
		`key: "args..x"`:                           "an empty field name",
		`fairness: {weights: {a: 1}}`:              "fairness.key: required",
		`fairness: {key: tenant, weights: {a: 0}}`: `fairness.weights["a"]`,
	} {
		_, err := decode(t, src)
		if !errors.Is(err, limits.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalid naming %q", src, err, want)
		}
	}
	if _, err := decode(t, `max_inflight: 2`); err == nil {
		t.Error("an unknown key was accepted")
	}
	if _, err := decode(t, `rate: {limit: 1, period: soon}`); err == nil || !strings.Contains(err.Error(), "no duration") {
		t.Errorf("a bad period: %v", err)
	}
	var nilLimits *limits.Limits
	if nilLimits.Validate() != nil || !nilLimits.Empty() {
		t.Error("nil limits are valid and empty")
	}
}

func TestCallValue(t *testing.T) {
	t.Parallel()
	c := limits.Call{Args: json.RawMessage(`{"customer":{"id":"c-7","n":42,"tags":["a"]},"tenant":"from-args"}`),
		Conversation: "01CONV", Agent: "ops", Tenant: "acme"}
	for key, want := range map[string]string{
		"tenant": "acme", "agent": "ops", "conversation": "01CONV",
		"args.tenant": "from-args", "customer.id": "c-7", "args.customer.n": "42",
		"customer.tags": `["a"]`, "customer.missing": "", "nothing.here": "",
	} {
		if got := c.Value(key); got != want {
			t.Errorf("Value(%q) = %q, want %q", key, got, want)
		}
	}
	long := limits.Call{Tenant: strings.Repeat("x", 200)}
	v := long.Value("tenant")
	if len(v) != 64 || !strings.HasPrefix(v, "xxxx") || v == long.Value("agent") {
		t.Errorf("a long value: %q (%d bytes), want 64 bytes with a digest", v, len(v))
	}
	other := limits.Call{Tenant: strings.Repeat("x", 199) + "y"}
	if other.Value("tenant") == v {
		t.Error("two long values that differ share a bucket")
	}
}

func TestCombineStricterWins(t *testing.T) {
	t.Parallel()
	c := limits.Call{Tenant: "acme", Agent: "ops"}
	worker := &limits.Limits{MaxInFlight: 10, Rate: &limits.Rate{Limit: 60, Period: limits.Duration(time.Minute), Burst: 5}, Priority: 2,
		Fairness: &limits.Fairness{Key: "tenant", Weights: map[string]float64{"acme": 2}}}
	agent := &limits.Limits{MaxInFlight: 2, Key: "tenant", Priority: 4}
	agentTool := &limits.Limits{MaxInFlight: 4, Rate: &limits.Rate{Limit: 30, Period: limits.Duration(time.Minute)}}
	p := limits.Combine(c, worker, nil, agent, agentTool)
	if len(p.Holds) != 2 {
		t.Fatalf("holds %+v, want one per key", p.Holds)
	}
	tool, tenant := p.Holds[0], p.Holds[1]
	if tool.Bucket != "" || tool.Max != 4 || tool.Every != 2*time.Second || tool.Burst != 1 {
		t.Errorf("the tool's hold %+v: want the smaller max_in_flight (4), the slower rate (2s) and the smaller burst (1)", tool)
	}
	if tenant.Bucket != "tenant=acme" || tenant.Max != 2 || tenant.Every != 0 {
		t.Errorf("the tenant's hold %+v", tenant)
	}
	if p.Priority != 4 {
		t.Errorf("priority %d: an agent may lower its calls' priority (4), not raise it", p.Priority)
	}
	if p.Fair != "tenant=acme" || p.Weight != 2 || p.Cool != "" {
		t.Errorf("fair %q weight %v cool %q", p.Fair, p.Weight, p.Cool)
	}
	if q := limits.Combine(c, nil, &limits.Limits{}); q.Limited() || q.Priority != limits.DefaultPriority {
		t.Errorf("no limits: %+v", q)
	}
	if q := limits.Combine(c, &limits.Limits{Key: "agent"}); !q.Limited() || q.Cool != "agent=ops" || q.Holds[0].Max != 0 {
		t.Errorf("a key alone holds the call to its key's cool-downs: %+v", q)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"2": 2 * time.Second, " 1.5 ": 1500 * time.Millisecond, "-3": 0, "999999": limits.MaxRetryAfter,
		"Tue, 01 Dec 2026 10:00:30 GMT": 30 * time.Second, "Tue, 01 Dec 2026 09:00:00 GMT": 0,
	} {
		if got, ok := limits.ParseRetryAfter(v, now); !ok || got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "soon", "NaN"} {
		if _, ok := limits.ParseRetryAfter(v, now); ok {
			t.Errorf("ParseRetryAfter(%q) accepted", v)
		}
	}
}
