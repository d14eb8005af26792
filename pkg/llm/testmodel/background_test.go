package testmodel_test

import (
	"context"
	"encoding/json"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/background"
	"github.com/offload-dev/offload/pkg/llm/testmodel"
	"github.com/offload-dev/offload/pkg/tool"
)

type topicArgs struct {
	Topic string `json:"topic"`
}

// runs counts the runs of each tool.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) add(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[name]++
}

func (r *runs) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[name]
}

// counted is a tool that counts its runs and answers "<name> on <topic>".
func counted(r *runs, name string, meta map[string]any) *tool.Tool {
	var opts []tool.Option
	if meta != nil {
		opts = append(opts, tool.Meta(meta))
	}
	return tool.Func(name, "Look into a topic.", func(_ context.Context, _ *tool.RunContext, a topicArgs) (string, error) {
		r.add(name)
		return name + " on " + a.Topic, nil
	}, opts...)
}

var taskRE = regexp.MustCompile(`[0-9A-Z]{26}`)

// With the agent's BackgroundTools, the test model calls every offered
// tool once, whether it runs in the background (always or by
// run_in_background) or inline, waits for the follow-ups, and its final
// text reports each tool's result, not its acknowledgement.
func TestAgentCallsBackgroundToolsOnce(t *testing.T) {
	t.Parallel()
	bg := map[string]any{"background": true}
	cases := []struct {
		name  string
		tools []string // of research, crawl (background), survey (optional background), ping (inline)
		args  map[string]json.RawMessage
		want  string
	}{
		{"one background", []string{"research"}, nil,
			"I called 1 tool.\n- research returned research on a"},
		{"several background", []string{"research", "crawl"}, nil,
			"I called 2 tools.\n- research returned research on a\n- crawl returned crawl on a"},
		{"optional background", []string{"survey"}, map[string]json.RawMessage{"survey": json.RawMessage(`{"topic":"owls","run_in_background":true}`)},
			"I called 1 tool.\n- survey returned survey on owls"},
		{"mixed with inline", []string{"research", "ping", "survey", "crawl"}, map[string]json.RawMessage{"survey": json.RawMessage(`{"topic":"owls","run_in_background":true}`)},
			"I called 4 tools.\n- research returned research on a\n- ping returned ping on a\n- survey returned survey on owls\n- crawl returned crawl on a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := &runs{n: map[string]int{}}
			all := map[string]*tool.Tool{
				"research": counted(r, "research", bg),
				"crawl":    counted(r, "crawl", bg),
				"survey":   counted(r, "survey", map[string]any{"background": "optional"}),
				"ping":     counted(r, "ping", nil),
			}
			var offered []*tool.Tool
			for _, n := range c.tools {
				offered = append(offered, all[n])
			}
			a, err := agent.New(agent.Config{
				Model:        testmodel.New(testmodel.Config{Prose: true, Args: c.args}),
				Toolsets:     []tool.Toolset{tool.MustSet(offered...)},
				Capabilities: []agent.Capability{background.Tools(background.Config{})},
				Limits:       agent.UsageLimits{Requests: agent.Limit(10)},
			})
			if err != nil {
				t.Fatal(err)
			}
			var started atomic.Int32
			res, err := a.Run(t.Context(), "Look into it.", &agent.RunOptions{OnEvent: func(e agent.Event) {
				if e.Type == agent.EventBackgroundTaskStarted {
					started.Add(1)
				}
			}})
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if got := taskRE.ReplaceAllString(res.Output, "<task>"); got != c.want {
				t.Errorf("output %q, want %q", got, c.want)
			}
			for _, n := range c.tools {
				if got := r.count(n); got != 1 {
					t.Errorf("%s ran %d times, want once", n, got)
				}
			}
			var wantStarted int32
			for _, n := range c.tools {
				if n != "ping" {
					wantStarted++
				}
			}
			if got := started.Load(); got != wantStarted {
				t.Errorf("%d background tasks started, want %d", got, wantStarted)
			}
		})
	}
}
