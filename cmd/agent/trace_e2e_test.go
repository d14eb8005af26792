package main

import (
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/otlprecv"
)

// TestApprovalSpan: an approval decided with nats pub while agent run
// --approve wait waits (with and without a traceparent header on the
// decision), or with a traced agent approve, is a span of the run's
// trace, from the announcement to the decision, with the decider and the
// outcome, linked to the decision's trace when it carried one (SPEC §14).
func TestApprovalSpan(t *testing.T) {
	t.Parallel()
	d := newDurable(t)
	nats := natsCLIPath(t) // skips before any process starts when it is missing
	recv, err := otlprecv.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recv.Close() })
	const decider = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		by, outcome, body string
		header            []string
		cli               bool // decided with agent approve, traced, rather than nats pub
	}{
		{"ann", "approved", `{"approved":true,"by":"ann"}`, nil, false},
		{"bob", "denied", `{"approved":false,"by":"bob","message":"not today"}`, []string{"-H", "traceparent:" + decider}, false},
		{"cy", "approved", "", nil, true},
	} {
		cmd := d.command("run", "--approve", "wait", "--wait", "1m", deployProd)
		cmd.Env = append(cmd.Env, "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.Endpoint())
		p := startPiped(t, cmd)
		var conv string
		var before, after time.Time
		p.events(t, func(ev map[string]any) {
			conv, _ = ev["conversation_id"].(string)
			if ev["type"] != "deferred_tool_requests" {
				return
			}
			for _, id := range ev["task_ids"].(map[string]any) {
				before = time.Now()
				if c.cli {
					if code, _, stderr := plain(t, d.dir, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.Endpoint()},
						"approve", "--conversation", conv, "--by", c.by, "--nats", d.nats.URL(), id.(string)); code != 0 {
						t.Fatalf("agent approve: exit %d: %s", code, stderr)
					}
				} else {
					args := append([]string{"--no-context", "--server", d.nats.URL(), "pub"}, c.header...)
					args = append(args, "tools.decision."+conv+"."+id.(string), c.body)
					if out, err := exec.CommandContext(t.Context(), nats, args...).CombinedOutput(); err != nil {
						t.Fatalf("nats pub: %v: %s", err, out)
					}
				}
				after = time.Now()
			}
		})
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: run: %v\n%s", c.by, err, p.stderr.String())
		}
		// The agent exported its spans as it exited.
		spans := recv.Spans()
		i := slices.IndexFunc(spans, func(s otlprecv.Span) bool {
			return s.Name == "approval deploy" && s.Attrs["gen_ai.conversation.id"] == conv
		})
		if i < 0 {
			t.Fatalf("%s: no approval span of conversation %s among %d spans", c.by, conv, len(spans))
		}
		ap := spans[i]
		if ap.Attrs["offload.approval.by"] != c.by || ap.Attrs["offload.approval.outcome"] != c.outcome || ap.Attrs["gen_ai.tool.name"] != "deploy" {
			t.Errorf("%s: approval span attributes %v", c.by, ap.Attrs)
		}
		// Linked to the decider's trace when the decision carried one: the
		// header given to nats pub, agent approve's own span.
		var want string
		switch {
		case c.header != nil:
			want = "4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7"
		case c.cli:
			i := slices.IndexFunc(spans, func(s otlprecv.Span) bool {
				return s.Name == "send decision" && s.Attrs["gen_ai.conversation.id"] == conv
			})
			if i < 0 {
				t.Fatalf("%s: agent approve exported no send span", c.by)
			}
			want = spans[i].TraceID + "/" + spans[i].SpanID
		}
		var links []string
		for _, l := range ap.Links {
			links = append(links, l.TraceID+"/"+l.SpanID)
		}
		if (want == "" && len(links) != 0) || (want != "" && (len(links) != 1 || links[0] != want)) {
			t.Errorf("%s: approval span's links %v, want %q", c.by, links, want)
		}
		run := slices.IndexFunc(spans, func(s otlprecv.Span) bool {
			return s.Name == "invoke_agent" && s.Attrs["gen_ai.conversation.id"] == conv
		})
		if run < 0 || spans[run].TraceID != ap.TraceID || ap.ParentSpanID != spans[run].SpanID {
			t.Fatalf("%s: the approval span is not a child of the run's span", c.by)
		}
		// It starts at the announcement, within the run, and ends at the
		// decision (when the server stored it).
		if ap.Start.Before(spans[run].Start) || !ap.Start.Before(ap.End) || ap.End.Before(before.Add(-time.Millisecond)) || ap.End.After(after) {
			t.Errorf("%s: approval span %v → %v; the run started at %v, the decision was published between %v and %v",
				c.by, ap.Start, ap.End, spans[run].Start, before, after)
		}
	}
}
