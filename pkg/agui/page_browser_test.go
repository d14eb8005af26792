package agui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/offload-dev/offload/internal/aguitest"
	"github.com/offload-dev/offload/internal/browsertest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// browser, do and eval are the browser kit's (internal/browsertest): a
// tab of headless Chromium, steps run within a bound, a value of the page.
func browser(t *testing.T) context.Context { return browsertest.Tab(t, 1000, 900) }

var do, eval = browsertest.Do, browsertest.Eval

// poll waits until expression holds in the page.
func poll(ctx context.Context, t *testing.T, what, expression string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, servetest.Wait)
	defer cancel()
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](expression)); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v; the page:\n%s", what, err, page)
	}
}

// exampleDir is examples/agui, the example page.
func exampleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "agui")
}

// TestExamplePageInBrowser drives the example page (examples/agui) in
// headless Chromium as a person would: a prompt, the approval card of the
// interrupt, Approve, the tool's result and the answer shown. The page
// loads @ag-ui/client from the local npm copy (its import map), served
// with it on the face's origin: nothing from the network. With
// OFFLOAD_AGUI_SCREENSHOT=FILE it writes a PNG of the card there.
func TestExamplePageInBrowser(t *testing.T) {
	modules := aguitest.NodeModules(t)
	ctx := browser(t)
	w := servetest.Setup(t)
	w.Stream = true
	w.Approval = &session.ApprovalPolicy{Timeout: time.Hour, OnTimeout: session.OnTimeoutDeny} // shown, never reached
	r := w.Replica(t, "a")
	const admin = "admin-token-0123456789abcdef"
	_, face := r.Face(t, admin+" admin alice\n", agentproc.FaceOptions{})
	mux := http.NewServeMux()
	mux.Handle("/agui/", face.Handler)
	mux.Handle("/node_modules/", http.StripPrefix("/node_modules/", http.FileServer(http.Dir(modules))))
	mux.Handle("/", http.FileServer(http.Dir(exampleDir())))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	// The page is driven through its DOM (values set, the form submitted,
	// buttons clicked by script): chromedp's visibility check (WaitVisible,
	// Click, SendKeys) never succeeds on this page in Debian's Chromium,
	// while the same calls work on pkg/web's pages.
	do(ctx, t, "open", chromedp.Navigate(srv.URL+"/"))
	poll(ctx, t, "the page's script", `document.body.dataset.ready === "1"`)
	eval(ctx, t, `document.querySelector("#agent").value = "ops";
		document.querySelector("#token").value = "`+admin+`";
		document.querySelector("#prompt").value = "deploy prod";
		document.querySelector("#ask").requestSubmit(); ""`)
	poll(ctx, t, "the approval card", `!!document.querySelector(".card .approve")`)
	card := eval(ctx, t, `document.querySelector(".card").innerText`)
	for _, want := range []string{"Approve deploy?", `"target": "prod"`, "Deploy a target.", "Expires"} {
		if !strings.Contains(card, want) {
			t.Errorf("the approval card lacks %q:\n%s", want, card)
		}
	}
	if path := os.Getenv("OFFLOAD_AGUI_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	eval(ctx, t, `document.querySelector(".card .approve").click(); ""`)
	poll(ctx, t, "the resumed run's end", `document.querySelector("#status").textContent === "done" && !document.querySelector(".card")`)
	transcript := eval(ctx, t, `document.querySelector("#transcript").innerText`)
	if !strings.Contains(transcript, "deployed prod") || !strings.Contains(transcript, "done deployed prod") {
		t.Fatalf("the transcript after the approval:\n%s", transcript)
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if w.Deploys["prod"] != 1 {
		t.Fatalf("deploys: %d, want 1", w.Deploys["prod"])
	}
}
