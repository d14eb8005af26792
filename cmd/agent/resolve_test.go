package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/deferred"
)

// The commands under a pending call: options before pub, absolute
// credential paths, the prefix, JSON quoted for a POSIX shell (a quote in
// the arguments survives), alternatives behind "# ".
func TestResolveCommandsFormat(t *testing.T) {
	t.Parallel()
	f := &runFlags{prefix: "acme", store: "rel/store"}
	f.conn.URL = "nats://u:secret@127.0.0.1:4222"
	f.conn.Creds = "creds/agent.creds"
	p := deferred.PendingTask{TaskID: "01JTASK0000000000000000002", Kind: deferred.KindApproval, Tool: "deploy", Args: json.RawMessage(`{"note": "it's"}`)}
	got := resolveCommands(f, false, "01JCONV0000000000000000002")(p)
	creds, _ := filepath.Abs("creds/agent.creds")
	subject := "acme.decision.01JCONV0000000000000000002.01JTASK0000000000000000002"
	want := []string{
		"nats --server nats://u:xxxxx@127.0.0.1:4222 --creds " + creds + " pub " + subject + ` '{"approved":true}'`,
		"# nats --server nats://u:xxxxx@127.0.0.1:4222 --creds " + creds + " pub " + subject + ` '{"approved":false,"message":"why"}'`,
		"# nats --server nats://u:xxxxx@127.0.0.1:4222 --creds " + creds + " pub " + subject + ` '{"approved":true,"override_args":{"note":"it'\''s"}}'`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The shell gives the nats CLI the JSON as it was.
	out, err := exec.Command("sh", "-c", "printf %s "+liveview.ShellQuote(`{"approved":true,"override_args":{"note":"it's"}}`)).Output()
	if err != nil || string(out) != `{"approved":true,"override_args":{"note":"it's"}}` {
		t.Fatalf("sh gave %q, %v", out, err)
	}

	// The embedded default: agent commands on the store, absolute.
	ext := deferred.PendingTask{TaskID: "01JTASK0000000000000000003", Kind: deferred.KindExternal, Tool: "ask_human", Args: json.RawMessage(`{}`)}
	got = resolveCommands(f, true, "01JCONV0000000000000000002")(ext)
	store, _ := filepath.Abs("rel/store")
	if len(got) != 1 || !strings.HasSuffix(got[0], " answer --store "+store+" --conversation 01JCONV0000000000000000002 --prefix acme 01JTASK0000000000000000003 "+`'{"content":"..."}'`) {
		t.Fatalf("embedded answer: %q", got)
	}
	if bg := resolveCommands(f, true, "C")(deferred.PendingTask{Kind: deferred.KindBackground}); bg != nil {
		t.Fatalf("a background task has no command: %q", bg)
	}
}
