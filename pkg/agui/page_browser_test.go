package agui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/offload-dev/offload/internal/aguitest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/session"
)

// browser starts headless Chromium (Debian's chromium, or $CHROMIUM) and
// returns a tab's context, closed when the test ends; skipped without it
// unless OFFLOAD_REQUIRE_BROWSER is set (as pkg/web's browser tests).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			if os.Getenv("OFFLOAD_REQUIRE_BROWSER") != "" {
				t.Fatalf("OFFLOAD_REQUIRE_BROWSER is set and chromium is not installed: %v", err)
			}
			t.Skip("browser test skipped: chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
		}
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1000, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs steps in the browser within a bound; on failure it shows the page.
func do(ctx context.Context, t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, servetest.Wait)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		page, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		t.Fatalf("%s: %v; the page:\n%s", what, err, page)
	}
}

// eval returns the value of expression in the page.
func eval(ctx context.Context, t *testing.T, expression string) string {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, servetest.Wait)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Evaluate[string](expression))
	if err != nil {
		t.Fatalf("%s: %v", expression, err)
	}
	return v
}

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
