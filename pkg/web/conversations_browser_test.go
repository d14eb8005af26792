package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// TestConversationsInBrowser walks the conversations' pages (SPEC §21) in
// headless Chromium as a person would: conversations started over the
// API (one pausing on two approvals, one failing, two with a tool call
// that runs until the test lets it end) are listed with their status, who
// started them and the failure's error, and filtered by status; a
// running conversation's page shows its running call, and its result
// live once the call returns; the cancel button stops another; the
// paused one's page shows both pending calls with what approving runs,
// approving one says "decision 1 of 2", approving the other continues
// the conversation and the page shows the result live. With
// OFFLOAD_CONVERSATIONS_SCREENSHOTS=DIR it writes the PNGs of docs/
// there.
func TestConversationsInBrowser(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv, _ := r.Face(t, adminToken+" admin alice\n"+opToken+" operator olga\n", agentproc.FaceOptions{})
	start := func(prompt string) string {
		t.Helper()
		code, out := call(t, srv, "POST", "/v1/conversations", opToken, `{"agent":"ops","prompt":"`+prompt+`"}`)
		if code != 202 {
			t.Fatalf("start %q: %d %v", prompt, code, out)
		}
		return out["conversation_id"].(string)
	}
	paused := start("deploys east west")
	failed := start("fail now")
	running := start("slow batch")
	<-b.SlowStarted
	doomed := start("slow doomed")
	<-b.SlowStarted
	for conv, want := range map[string]string{paused: "paused", failed: "failed"} {
		waitStatus(t, srv, conv, want)
	}
	shots := os.Getenv("OFFLOAD_CONVERSATIONS_SCREENSHOTS")

	ctx := browser(t)
	do(ctx, t, "log in and open the conversations",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", adminToken),
		chromedp.Click("#login"),
		chromedp.WaitVisible("#pending"),
		chromedp.Click(`header a[href="/conversations"]`),
		chromedp.WaitVisible("#conv-"+paused),
	)
	for conv, want := range map[string][]string{
		paused:  {"paused", "ops", "olga"},
		failed:  {"failed", "olga", "the model is down"},
		running: {"running", "olga"},
		doomed:  {"running", "olga"},
	} {
		row := text(ctx, t, "#conv-"+conv)
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("the row of %s lacks %q:\n%s", conv, w, row)
			}
		}
	}
	if shots != "" {
		shoot(ctx, t, shots+"/conversations.png")
	}
	do(ctx, t, "filter the failed ones", chromedp.Click(`nav.tabs a[href="/conversations?status=failed"]`),
		chromedp.WaitVisible("#conv-"+failed), chromedp.WaitNotPresent("#conv-"+paused))
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#conversations tbody tr').length`)); err != nil || n != 1 {
		t.Errorf("the failed ones: %d rows (%v), want 1", n, err)
	}

	// A failed conversation's page says why.
	do(ctx, t, "the failed conversation's page", chromedp.Navigate(srv.URL+"/conversations/"+failed), chromedp.WaitVisible("#error"))
	if e := text(ctx, t, "#error"); !strings.Contains(e, "the model is down") {
		t.Errorf("the failed conversation's error: %q", e)
	}

	// A running conversation's page shows the call that runs.
	do(ctx, t, "the running conversation's page", chromedp.Navigate(srv.URL+"/conversations/"+running),
		chromedp.WaitVisible("#live-call_1.running"))
	if c := text(ctx, t, "#live-call_1"); !strings.Contains(c, "slow") || !strings.Contains(c, `"target": "batch"`) || !strings.Contains(c, "running") ||
		!strings.Contains(c, "half of batch done") || !strings.Contains(c, "50%") {
		t.Errorf("the running call:\n%s", c)
	}
	if s := text(ctx, t, "#status"); s != "running" {
		t.Errorf("the running conversation's status: %q", s)
	}

	// The cancel button stops another.
	do(ctx, t, "cancel a run", chromedp.Navigate(srv.URL+"/conversations/"+doomed), chromedp.WaitVisible("#cancel"),
		chromedp.Click("#cancel"), chromedp.WaitVisible("#notice"), chromedp.WaitVisible("#error"))
	if e := text(ctx, t, "#error"); !strings.Contains(e, "cancelled over the API") {
		t.Errorf("the cancelled conversation's error: %q", e)
	}

	// The running one's result, live.
	do(ctx, t, "back to the running one", chromedp.Navigate(srv.URL+"/conversations/"+running), chromedp.WaitVisible("#live-call_1.running"))
	close(b.SlowGate)
	do(ctx, t, "its result, live", chromedp.WaitNotPresent("#live-call_1"), chromedp.WaitVisible("#status.finished"))
	if tl := text(ctx, t, "#timeline"); !strings.Contains(tl, "slowed batch") {
		t.Errorf("the finished timeline:\n%s", tl)
	}

	// The paused one: both calls, what approving runs, "1 of 2".
	do(ctx, t, "the paused conversation's page", chromedp.Navigate(srv.URL+"/conversations/"+paused), chromedp.WaitVisible("#waiting"))
	tasks, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#waiting section.call')).map(function (s) { return s.dataset.task; })`))
	if err != nil || len(tasks) != 2 {
		t.Fatalf("the paused conversation's pending calls: %v (%v), want 2", tasks, err)
	}
	for _, task := range tasks {
		card := text(ctx, t, "#call-"+task)
		for _, want := range []string{"Approving runs deploy: Deploy a target.", "Decision 1 of 2 of this conversation", "1 other call waits", "Last prompt: “deploys east west”", "started by olga"} {
			if !strings.Contains(card, want) {
				t.Errorf("the card of %s lacks %q:\n%s", task, want, card)
			}
		}
	}
	if shots != "" {
		shoot(ctx, t, shots+"/conversation.png")
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#timeline .waits a').length`)); err != nil || n != 2 {
		t.Errorf("the timeline's calls that wait for a person: %d (%v), want 2 linked to their cards", n, err)
	}
	first, second := "#call-"+tasks[0], "#call-"+tasks[1]
	do(ctx, t, "approve the first", chromedp.Click(first+" button[value=approve]"), chromedp.WaitNotPresent(first), chromedp.WaitVisible("#notice"))
	if n := text(ctx, t, "#notice"); n != "Approved deploy (task "+tasks[0]+"). Decision 1 of 2 of its conversation: 1 more waits." {
		t.Errorf("the notice after the first approval: %q", n)
	}
	if card := text(ctx, t, second); !strings.Contains(card, "Decision 2 of 2 of this conversation · the last one it waits for") {
		t.Errorf("the second card after the first approval:\n%s", card)
	}
	do(ctx, t, "approve the second", chromedp.Click(second+" button[value=approve]"), chromedp.WaitNotPresent(second), chromedp.WaitVisible("#notice"))
	if n := text(ctx, t, "#notice"); !strings.Contains(n, "Decision 2 of 2 of its conversation: none waits now, it continues.") {
		t.Errorf("the notice after the second approval: %q", n)
	}
	do(ctx, t, "the result, live", chromedp.WaitVisible("#status.finished"))
	if tl := text(ctx, t, "#timeline"); !strings.Contains(tl, "deployed east") || !strings.Contains(tl, "approved by alice via inbox") {
		t.Errorf("the continued conversation's timeline:\n%s", tl)
	}
}

// shoot writes a PNG of the whole page to path.
func shoot(ctx context.Context, t *testing.T, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitStatus waits until GET /v1/conversations/{conv} says status want.
func waitStatus(t *testing.T, srv *httptest.Server, conv, want string) {
	t.Helper()
	offloadtest.Eventually(t, "conversation "+conv+" "+want, func() error {
		_, got := call(t, srv, "GET", "/v1/conversations/"+conv, adminToken, "")
		if got["status"] != want {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
}
