package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// scrape reads url's /metrics.
func scrape(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, raw)
	}
	return string(raw)
}

// TestServeMetricsPendingAcrossProcesses: agent serve's /metrics has the
// store's offload_pending_calls{kind} (SPEC §7): a call paused on an
// approval by one replica is counted by the other, which never ran it, and
// no longer once it is decided; the per-process {mode} gauge is not in
// serve's registry.
func TestServeMetricsPendingAcrossProcesses(t *testing.T) {
	w := newServeWorld(t)
	_, url1 := w.replica(t)
	_, url2 := w.replica(t)
	if m := scrape(t, url1); !strings.Contains(m, `offload_pending_calls{kind="approval"} 0`) {
		t.Fatalf("/metrics before any call lacks the store-wide gauge at 0:\n%s", m)
	}
	conv, task := startPaused(t, url2, "prod")
	m := scrape(t, url1)
	if !strings.Contains(m, `offload_pending_calls{kind="approval"} 1`) {
		t.Errorf("the other replica's /metrics does not count the paused call:\n%s", m)
	}
	if strings.Contains(m, `offload_pending_calls{mode=`) {
		t.Errorf("serve's /metrics has the per-process {mode} gauge:\n%s", m)
	}
	w.pub("tools.decision."+conv+"."+task, `{"approved":true,"by":"ann"}`)
	awaitFinished(t, url2, conv)
	if m := scrape(t, url1); !strings.Contains(m, `offload_pending_calls{kind="approval"} 0`) {
		t.Errorf("/metrics after the decision still counts the call:\n%s", m)
	}
}
