package limits

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// Call is what a limit's key is read from: a call's arguments and who
// made it.
type Call struct {
	// Args are the call's arguments, a JSON object.
	Args json.RawMessage
	// Conversation, Agent and Tenant are the call's conversation, the
	// name of its agent and its conversation's tenant ("" when none).
	Conversation, Agent, Tenant string
}

// maxValue bounds a key's value as a bucket names it: a longer one keeps
// its start and a digest of the whole.
const maxValue = 64

// Value returns c's value of key (conversation, agent, tenant, or a field
// path of the arguments): a string as it is, another JSON value as its
// compact text, "" when the call has none. A value longer than 64 bytes is
// shortened to its start and a digest of the whole.
func (c Call) Value(key string) string {
	var v string
	switch key {
	case KeyConversation:
		v = c.Conversation
	case KeyAgent:
		v = c.Agent
	case KeyTenant:
		v = c.Tenant
	default:
		v = argValue(c.Args, strings.TrimPrefix(key, ArgsPrefix))
	}
	if len(v) > maxValue {
		sum := sha256.Sum256([]byte(v))
		v = v[:maxValue-17] + "~" + hex.EncodeToString(sum[:8])
	}
	return v
}

// argValue reads the dotted field path of the JSON object args.
func argValue(args json.RawMessage, path string) string {
	cur := args
	for _, name := range strings.Split(path, ".") {
		var obj map[string]json.RawMessage
		if json.Unmarshal(cur, &obj) != nil {
			return ""
		}
		next, ok := obj[name]
		if !ok {
			return ""
		}
		cur = next
	}
	var s string
	if json.Unmarshal(cur, &s) == nil {
		return s
	}
	var b bytes.Buffer
	if json.Compact(&b, cur) != nil || b.String() == "null" {
		return ""
	}
	return b.String()
}

// BucketOf returns the name of the bucket of key's value v, "<key>=<v>":
// what the calls limited per that key's value share. The tool-wide
// bucket is "".
func BucketOf(key, v string) string {
	if key == "" {
		return ""
	}
	return key + "=" + v
}

// Hold is one limit a call is held to: its bucket (the calls that share
// the limit: "" every call of the tool, else "<key>=<value>"), the most
// calls of the bucket running at once and the GCRA interval and burst of
// its rate. A hold with neither (a key alone) only subjects the call to
// the bucket's cool-down.
type Hold struct {
	Bucket string        `json:"b,omitempty"`
	Max    int           `json:"max,omitempty"`
	Every  time.Duration `json:"every,omitempty"`
	Burst  int           `json:"burst,omitempty"`
}

// Plan is what holds one call: the limits of every source combined (the
// stricter wins), its priority and its fairness key.
type Plan struct {
	// Holds are the call's limits, one per bucket.
	Holds []Hold `json:"holds,omitempty"`
	// Priority is 1 (highest) to 5.
	Priority int `json:"priority"`
	// Fair is the bucket of the call's fairness key ("" without
	// fairness), and Weight the weight of its value.
	Fair   string  `json:"fair,omitempty"`
	Weight float64 `json:"weight,omitempty"`
	// Cool is the bucket a cool-down the call's result asks for applies
	// to: the first source's key, else the tool.
	Cool string `json:"cool,omitempty"`
}

// Limited reports whether the plan holds the call to anything: without a
// hold, a call never waits (nor does its priority or fairness matter).
func (p Plan) Limited() bool { return len(p.Holds) > 0 }

// Combine returns the plan of call c under the limits of sources, the
// first the tool's own (the worker's config, which its registry entry
// carries) and the next the agent's (its spec), nil ones skipped. Limits
// per the same key combine, the stricter winning: the smaller
// max_in_flight, the slower rate, the smaller burst; limits per
// different keys all hold. The priority is the lowest asked for (the
// largest number: an agent may lower its calls' priority, never raise
// it above the tool's); fairness is the first source's that has one.
func Combine(c Call, sources ...*Limits) Plan {
	p := Plan{Priority: 0}
	byBucket := map[string]int{} // index in p.Holds
	coolSet := false
	for _, l := range sources {
		if l.Empty() && (l == nil || l.Key == "") {
			continue
		}
		if l.Priority != 0 && l.Priority > p.Priority {
			p.Priority = l.Priority
		}
		if l.Fairness != nil && p.Fair == "" {
			v := c.Value(l.Fairness.Key)
			p.Fair = BucketOf(l.Fairness.Key, v)
			p.Weight = 1
			if w, ok := l.Fairness.Weights[v]; ok && w > 0 {
				p.Weight = w
			}
		}
		if l.MaxInFlight == 0 && l.Rate == nil && l.Key == "" {
			continue
		}
		b := ""
		if l.Key != "" {
			b = BucketOf(l.Key, c.Value(l.Key))
		}
		if !coolSet {
			p.Cool, coolSet = b, true
		}
		i, ok := byBucket[b]
		if !ok {
			i = len(p.Holds)
			byBucket[b] = i
			p.Holds = append(p.Holds, Hold{Bucket: b})
		}
		h := &p.Holds[i]
		if l.MaxInFlight > 0 && (h.Max == 0 || l.MaxInFlight < h.Max) {
			h.Max = l.MaxInFlight
		}
		if r := l.Rate; r != nil {
			if every := r.Interval(); every > h.Every {
				h.Every = every
			}
			if h.Burst == 0 || r.burst() < h.Burst {
				h.Burst = r.burst()
			}
		}
	}
	if p.Priority == 0 {
		p.Priority = DefaultPriority
	}
	return p
}
