// Package browsertest is the kit of the tests that drive a page in
// headless Chromium (Debian's chromium, as .ci/run installs it) through
// chromedp: a tab with a fresh profile, steps run within a bound that
// show the page when they fail, and the page's values read.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/offload-dev/offload/internal/offloadtest"
)

// RequireEnv is the environment variable that makes a missing Chromium a
// failure instead of a skip (.ci/run sets it once it has installed
// Debian's chromium).
const RequireEnv = "OFFLOAD_REQUIRE_BROWSER"

// Tab starts headless Chromium ($CHROMIUM, or chromium on the PATH) with
// a new profile and a window of width × height, and returns a tab's
// context, closed when the test ends. Without Chromium the test is
// skipped, saying so, unless RequireEnv is set.
func Tab(t *testing.T, width, height int) context.Context {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			if os.Getenv(RequireEnv) != "" {
				t.Fatalf("%s is set and chromium is not installed: %v", RequireEnv, err)
			}
			t.Skip("browser test skipped: chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
		}
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// Do runs steps in the tab ctx within offloadtest.Wait; on failure it
// fails the test with what, the error and the page's address and text.
func Do(ctx context.Context, t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, offloadtest.Wait)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		page, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		t.Fatalf("%s: %v; the page:\n%s", what, err, page)
	}
}

// Eval returns the string value of expression in the tab ctx.
func Eval(ctx context.Context, t *testing.T, expression string) string {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, offloadtest.Wait)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Evaluate[string](expression))
	if err != nil {
		t.Fatalf("%s: %v", expression, err)
	}
	return v
}

// Text returns the text of the element sel in the tab ctx.
func Text(ctx context.Context, t *testing.T, sel string) string {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, offloadtest.Wait)
	defer cancel()
	s, err := chromedp.Run(sctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}
