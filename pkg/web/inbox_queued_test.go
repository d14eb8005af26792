package web

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/pending"
)

// The inbox shows the calls held in their tools' queues apart from what
// waits for a person (SPEC §19): queued, why, the tenant, with a link to
// the conversation, and no form to decide them; none, no section.
func TestInboxShowsQueued(t *testing.T) {
	q := pending.Queued{ConversationID: "C1", TaskID: "T1", Tool: "job", Tenant: "acme", Kind: pending.KindQueued, Reason: "rate",
		Since: time.Date(2026, 12, 7, 22, 10, 5, 0, time.UTC)}
	var b bytes.Buffer
	if err := pages["inbox"].Execute(&b, map[string]any{"Items": []item{}, "Queued": []pending.Queued{q}, "MayDecide": true, "CSRF": "x"}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{`id="queued"`, `job · <span class="reason">queued: rate</span> · tenant acme · since 22:10:05`,
		`<a href="/conversations/C1">conversation C1</a> · task T1`, `Nothing waits for a person.`} {
		if !strings.Contains(page, want) {
			t.Errorf("the inbox lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "<form") {
		t.Errorf("a queued call has a form:\n%s", page)
	}
	b.Reset()
	if err := pages["inbox"].Execute(&b, map[string]any{"Items": []item{}, "CSRF": "x"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), `id="queued"`) {
		t.Error("a queued section with nothing queued")
	}
}
