package web_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// multipartBody is a multipart/form-data body with the form's fields and
// a file part of size bytes (over net/http's 32 MiB in memory, so that
// ParseMultipartForm writes it to $TMPDIR).
func multipartBody(t *testing.T, fields url.Values, size int) (string, io.Reader) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for k, vs := range fields {
		for _, v := range vs {
			if err := mw.WriteField(k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	fw, err := mw.CreateFormFile("upload", "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.Write(bytes.Repeat([]byte{'x'}, size)); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), &b
}

// The attack of issue 37 (unauthenticated disk filling): multipart file
// parts POSTed to /login, and by a logged-in client to an inbox form, and
// to a signed link's page, were written to $TMPDIR by
// Request.ParseMultipartForm and never removed. Every form is parsed
// once, by the route wrapper, urlencoded only: a multipart body is 415,
// nothing is written to $TMPDIR; a body over 1 MiB is 413.
func TestMultipartBodiesLeaveNoFiles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv := inboxServer(t, r)
	f := r.Start(t, "deploy prod")
	conv, task := f.ConversationID, servetest.Paused(t, f)
	c := clientWith(t, srv, approverToken)
	_, page := send(t, c, "GET", srv.URL+"/", nil, nil)
	csrf, digest := csrfField.FindStringSubmatch(page)[1], digestField.FindStringSubmatch(page)[1]
	const size = 33 << 20
	for name, target := range map[string]struct {
		path   string
		c      *http.Client
		fields url.Values
	}{
		"login":         {"/login", browserless(t), url.Values{"token": {"nope-nope-nope-nope"}}},
		"an inbox form": {"/conversations/" + conv + "/calls/" + task + "/decide", c, url.Values{"csrf": {csrf}, "args_digest": {digest}, "action": {"deny"}}},
		"a link's page": {"/links/not-a-link", browserless(t), url.Values{"reason": {"no"}}},
	} {
		ctype, body := multipartBody(t, target.fields, size)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+target.path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ctype)
		resp, err := target.c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("%s: multipart: %d, want 415", name, resp.StatusCode)
		}
		left, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range left {
			t.Errorf("%s: %s left in $TMPDIR", name, e.Name())
			_ = os.Remove(tmp + "/" + e.Name())
		}
	}
	// An urlencoded body over the bound is refused before it is parsed.
	big := url.Values{"token": {strings.Repeat("x", 2<<20)}}
	if resp, _ := send(t, browserless(t), "POST", srv.URL+"/login", big, nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MiB form: %d, want 413", resp.StatusCode)
	}
	// The call is still pending: nothing was decided by the refused forms.
	if _, page := send(t, c, "GET", srv.URL+"/", nil, nil); !strings.Contains(page, "call-"+task) {
		t.Errorf("the call is no longer pending:\n%s", page)
	}
}
