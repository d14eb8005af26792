package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
)

// agent serve --notify URL --public-url URL POSTs the notification of an
// approval requested, with the inbox's and the signed approve/deny links
// under the public URL; a
// --notify value that is not an http(s) URL is a usage error.
func TestServeE2ENotify(t *testing.T) {
	w := newServeWorld(t)
	posts := make(chan map[string]any, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var note map[string]any
		if err := json.Unmarshal(raw, &note); err != nil {
			t.Errorf("notification %s: %v", raw, err)
		}
		posts <- note
	}))
	defer recv.Close()

	bad := proctest.StartProcess(t, agentBinary(t), "serve", "--nats", w.nats.URL(), "--spec", w.spec, "--tokens", w.tokens,
		"--store", filepath.Join(w.dir, "store"), "--notify", "ftp://example.com/hook")
	offloadtest.WaitOrTimeout(t, bad.Done(), "agent serve refusing --notify ftp://")
	if code := bad.ExitCode(); code != exitUsage {
		t.Errorf("--notify ftp://: exit %d, want %d (usage)", code, exitUsage)
	}

	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	p := proctest.StartProcess(t, agentBinary(t), "serve", "--nats", w.nats.URL(), "--spec", w.spec, "--tokens", w.tokens,
		"--http", addr, "--store", filepath.Join(w.dir, "store"), "--notify", recv.URL+"/hook", "--public-url", "https://agents.example.com")
	p.WaitLog(t, "agent serve: http://", 30*time.Second)
	conv, task := startPaused(t, "http://"+addr, "prod")
	note := offloadtest.WaitOrTimeout(t, posts, "the notification of the approval requested")
	links, _ := note["links"].(map[string]any)
	if note["event"] != "approval_requested" || note["conversation_id"] != conv || note["task_id"] != task || note["tool"] != "deploy" ||
		note["agent"] != "ops" || links["inbox"] != "https://agents.example.com/" {
		t.Errorf("notification %v", note)
	}
	for _, action := range []string{"approve", "deny"} {
		if l, _ := links[action].(string); !strings.HasPrefix(l, "https://agents.example.com/links/") {
			t.Errorf("the %s link %q, want a signed link under --public-url", action, l)
		}
	}
}
