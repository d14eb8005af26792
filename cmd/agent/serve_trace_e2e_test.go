package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/otlprecv"
)

// serveApprover is the approver's token of TestServeTracesAndApprovals.
const serveApprover = "approver-token-0123456789"

// inboxDecide logs in to the inbox of url with token and approves task
// of conversation conv with its form, as a browser would.
func inboxDecide(t *testing.T, url0, token, conv, task string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	post := func(path string, form url.Values) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url0+path, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	field := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url0+"/login", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req) // the login form: its pre-session cookie and CSRF token
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	login := field.FindStringSubmatch(string(form))
	if login == nil {
		t.Fatalf("the login form has no CSRF token:\n%s", form)
	}
	code, page := post("/login", url.Values{"token": {token}, "next": {"/"}, "csrf": {login[1]}})
	csrf := field.FindStringSubmatch(page)
	digest := regexp.MustCompile(`name="args_digest" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if code != http.StatusOK || csrf == nil || digest == nil || !strings.Contains(page, "call-"+task) {
		t.Fatalf("the inbox after logging in: %d\n%s", code, page)
	}
	if code, page := post("/conversations/"+conv+"/calls/"+task+"/decide",
		url.Values{"csrf": {csrf[1]}, "args_digest": {digest[1]}, "action": {"approve"}}); code != http.StatusOK || !strings.Contains(page, "Approved ") || !strings.Contains(page, "(task "+task+").") {
		t.Fatalf("approve in the inbox: %d\n%s", code, page)
	}
}

// TestServeTracesAndApprovals: agent serve records what agent run records
// (SPEC §14): a run it starts over the API, the continuation a wake
// starts and the decision its inbox publishes each export their spans
// (the decision a producer span with its channel, to which the run's
// approval span links), and its /metrics has the approval metrics of the
// decision applied.
func TestServeTracesAndApprovals(t *testing.T) {
	w := newServeWorld(t)
	if err := os.WriteFile(w.tokens, []byte(serveOperator+" operator ops\n"+serveViewer+" viewer val\n"+serveApprover+" approver ann\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	recv, err := otlprecv.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recv.Close() })
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.Endpoint())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	_, url1 := w.replica(t)
	conv, task := startPaused(t, url1, "prod")
	inboxDecide(t, url1, serveApprover, conv, task)
	awaitFinished(t, url1, conv)

	var spans []otlprecv.Span
	of := func(name string) []otlprecv.Span {
		var out []otlprecv.Span
		for _, s := range spans {
			if s.Name == name && s.Attrs["gen_ai.conversation.id"] == conv {
				out = append(out, s)
			}
		}
		return out
	}
	// The replica exports on its batch processor's schedule: polled.
	offloadtest.Eventually(t, "the run's, the continuation's and the decision's spans", func() error {
		spans = recv.Spans()
		if runs, sends, approvals := of("invoke_agent"), of("send decision"), of("approval deploy"); len(runs) < 2 || len(sends) != 1 || len(approvals) != 1 {
			return fmt.Errorf("%d runs, %d decisions sent, %d approval spans of %d spans", len(runs), len(sends), len(approvals), len(spans))
		}
		return nil
	})
	send, approval := of("send decision")[0], of("approval deploy")[0]
	if send.Attrs["offload.decision.channel"] != "inbox" || send.Attrs["offload.task_id"] != task {
		t.Errorf("the inbox's decision span: %v", send.Attrs)
	}
	if approval.Attrs["offload.approval.by"] != "ann" || approval.Attrs["offload.approval.outcome"] != "approved" {
		t.Errorf("the approval span: %v", approval.Attrs)
	}
	if !slices.ContainsFunc(approval.Links, func(l otlprecv.Link) bool { return l.TraceID == send.TraceID && l.SpanID == send.SpanID }) {
		t.Errorf("the approval span's links %v do not name the inbox's decision %s/%s", approval.Links, send.TraceID, send.SpanID)
	}
	if m := scrape(t, url1); !strings.Contains(m, `offload_approvals_total{outcome="approved",tool="deploy"} 1`) ||
		!strings.Contains(m, `offload_decision_seconds_count{tool="deploy"} 1`) {
		t.Errorf("/metrics after an inbox approval lacks the approval metrics:\n%s", m)
	}
}
