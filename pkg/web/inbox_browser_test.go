package web_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/browsertest"
	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// browser, do and text are the browser kit's (internal/browsertest): a
// tab of headless Chromium, steps run within a bound, an element's text.
func browser(t *testing.T) context.Context { return browsertest.Tab(t, 1200, 1000) }

var do, text = browsertest.Do, browsertest.Text

// TestInboxInBrowser drives the web inbox (SPEC §12) in headless Chromium
// as a person would: log in, see the pending calls (and one that pauses
// while the page is open, by the live updates), edit a call's arguments
// with an invalid value (the error at the field, nothing published),
// approve, deny another with a reason, answer an external call; the
// conversations continue, and their timelines show who decided. With
// OFFLOAD_INBOX_SCREENSHOT=FILE it writes a PNG of the inbox there.
func TestInboxInBrowser(t *testing.T) {
	began := time.Now()
	b := servetest.Setup(t)
	b.Approval = &session.ApprovalPolicy{Timeout: time.Hour, OnTimeout: session.OnTimeoutDeny} // shown, never reached
	r := b.Replica(t, "r1")
	srv, _ := r.Face(t, adminToken+" admin alice\n", agentproc.FaceOptions{})
	first := r.Start(t, "deploy prod")
	convProd, taskProd := first.ConversationID, servetest.Paused(t, first)
	second := r.Start(t, "deploy staging")
	convStaging, taskStaging := second.ConversationID, servetest.Paused(t, second)
	third := r.Start(t, "ask question")
	convAsk, taskAsk := third.ConversationID, servetest.Paused(t, third)

	ctx := browser(t)
	do(ctx, t, "log in",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", adminToken),
		chromedp.Click("#login"),
		chromedp.WaitVisible("#call-"+taskProd),
	)
	card := text(ctx, t, "#call-"+taskProd)
	for _, want := range []string{"approval", "deploy", "agent ops", "Approving runs deploy: Deploy a target.", `"target": "prod"`, "Last prompt: “deploy prod”", "waiting", "deny at ", "Links for someone else"} {
		if !strings.Contains(card, want) {
			t.Errorf("the call's card lacks %q:\n%s", want, card)
		}
	}
	if ext := text(ctx, t, "#call-"+taskAsk); !strings.Contains(ext, "external") || !strings.Contains(ext, "ask") {
		t.Errorf("the external call's card:\n%s", ext)
	}
	// A conversation that pauses while the page is open appears without a
	// reload (the SSE stream of the pending records).
	live := r.Start(t, "deploy canary")
	liveTask := servetest.Paused(t, live)
	do(ctx, t, "the live update", chromedp.WaitVisible("#call-"+liveTask))

	// Edited arguments failing the tool's schema: the error at the field,
	// the edited value kept, nothing published.
	prodCard := "#call-" + taskProd
	do(ctx, t, "edit with an invalid value",
		chromedp.Click(prodCard+" details summary"),
		chromedp.SetValue(prodCard+" textarea[name=args]", `{"target": 5}`),
		chromedp.Click(prodCard+" button[value=edit]"),
		chromedp.WaitVisible("#error-"+taskProd),
	)
	if msg := text(ctx, t, "#error-"+taskProd); !strings.Contains(msg, "target: must be a string, not an integer (5)") {
		t.Errorf("the field's error: %q, want it in a person's words", msg)
	}
	if v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+prodCard+` textarea[name=args]').value`)); err != nil || v != `{"target": 5}` {
		t.Errorf("the edited value shown again: %q, %v", v, err)
	}
	decisions, err := r.JS.Stream(t.Context(), "TOOLS_DECISIONS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decisions.GetLastMsgForSubject(t.Context(), "tools.decision."+convProd+"."+taskProd); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a decision was stored for the refused edit: %v", err)
	}
	if path := os.Getenv("OFFLOAD_INBOX_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// After each form, the inbox again (the redirect) without the call,
	// and a notice: waiting for the call's card to go waits for the new
	// page (the old one may show a notice too).
	do(ctx, t, "approve", chromedp.Click(prodCard+" button[value=approve]"), chromedp.WaitNotPresent(prodCard), chromedp.WaitVisible("#notice"))
	if n := text(ctx, t, "#notice"); n != "Approved deploy (task "+taskProd+")." {
		t.Errorf("notice after approving: %q", n)
	}
	stagingCard := "#call-" + taskStaging
	do(ctx, t, "deny with a reason",
		chromedp.SendKeys(stagingCard+" input[name=reason]", "not on a Friday"),
		chromedp.Click(stagingCard+" button[value=deny]"),
		chromedp.WaitNotPresent(stagingCard),
		chromedp.WaitVisible("#notice"),
	)
	askCard := "#call-" + taskAsk
	do(ctx, t, "answer the external call",
		chromedp.SendKeys(askCard+" textarea[name=content]", "42"),
		chromedp.Click(askCard+" button"),
		chromedp.WaitNotPresent(askCard),
		chromedp.WaitVisible("#notice"),
	)
	if n := text(ctx, t, "#notice"); n != "Answered ask (task "+taskAsk+")." {
		t.Errorf("notice after answering: %q", n)
	}
	// The conversations continue.
	servetest.Finished(t, r, convProd, "done deployed prod")
	servetest.Finished(t, r, convAsk, "done 42")
	offloadtest.Eventually(t, "the denied conversation finished", func() error {
		c, err := r.Svc.Get(context.Background(), convStaging)
		if err != nil {
			return err
		}
		if c.Status != "finished" || !strings.Contains(c.Output, "not on a Friday") {
			return errors.New(c.Status + ": " + c.Output)
		}
		return nil
	})
	// A timeline open while its call is decided elsewhere (nats pub) shows
	// the decision without a reload (the conversation's event stream).
	do(ctx, t, "a waiting conversation's timeline", chromedp.Navigate(srv.URL+"/conversations/"+live.ConversationID),
		chromedp.WaitVisible("#timeline"), chromedp.WaitNotPresent("#timeline .decision"))
	b.Decide(t, r.JS, live.ConversationID, liveTask)
	do(ctx, t, "the timeline's live update", chromedp.WaitVisible("#timeline .decision"))
	if d := text(ctx, t, "#timeline .decision"); !strings.Contains(d, "approved by ann via nats") {
		t.Errorf("the timeline's decision by nats pub: %q", d)
	}
	servetest.Finished(t, r, live.ConversationID, "done deployed canary")
	// The timelines show who decided, and what.
	do(ctx, t, "the approved conversation's timeline", chromedp.Navigate(srv.URL+"/conversations/"+convProd), chromedp.WaitVisible("#timeline .decision"))
	if d := text(ctx, t, "#timeline .decision"); !strings.Contains(d, "approved by alice via inbox") {
		t.Errorf("the timeline's decision: %q", d)
	}
	if tl := text(ctx, t, "#timeline"); !strings.Contains(tl, "deploy prod") || !strings.Contains(tl, "deployed prod") {
		t.Errorf("the timeline:\n%s", tl)
	}
	do(ctx, t, "the denied conversation's timeline", chromedp.Navigate(srv.URL+"/conversations/"+convStaging), chromedp.WaitVisible("#timeline .decision"))
	if d := text(ctx, t, "#timeline .decision"); !strings.Contains(d, "denied by alice") || !strings.Contains(d, "not on a Friday") {
		t.Errorf("the timeline's denial: %q", d)
	}
	t.Logf("browser test took %v", time.Since(began).Round(time.Millisecond))
}
