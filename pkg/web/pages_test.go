package web_test

import (
	"cmp"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// pendingPage is an answer of GET /v1/pending.
type pendingPage struct {
	Pending []struct {
		TaskID string `json:"task_id"`
	} `json:"pending"`
	Next string `json:"next"`
}

// nextLink is the inbox's link to its next page.
var nextLink = regexp.MustCompile(`<a id="next-page" rel="next" href="([^"]+)">Next page</a>`)

// GET /v1/pending and the inbox are read page by page (SPEC §21): each
// call once across the pages of ?limit= calls, the API's next cursor and
// the inbox's "Next page" link (plain HTML, no script) leading to the
// next page, none on the last; a garbled cursor, one of another filter,
// and a limit that is not a whole number from 1 are 400 with a clear
// error.
func TestPendingPages(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv := inboxServer(t, r)
	var want []string
	for range 5 {
		code, final := call(t, srv, "POST", "/v1/conversations?wait=1", adminToken, `{"agent":"ops","prompt":"deploy prod"}`)
		if code != 200 || final["status"] != "paused" {
			t.Fatalf("start: %d %v", code, final)
		}
		want = append(want, final["pending"].([]any)[0].(map[string]any)["task_id"].(string))
	}
	slices.Sort(want)

	var got []string
	path, pages := "/v1/pending?limit=2", 0
	first := ""
	for {
		var page pendingPage
		if code := callJSON(t, srv, "GET", path, viewerToken, "", &page); code != 200 || len(page.Pending) > 2 {
			t.Fatalf("%s: %d %+v", path, code, page)
		}
		pages++
		for _, c := range page.Pending {
			got = append(got, c.TaskID)
		}
		if page.Next == "" {
			break
		}
		if first == "" {
			first = page.Next
		}
		path = "/v1/pending?limit=2&cursor=" + url.QueryEscape(page.Next)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("the API's pages listed %v in %d pages, want %v in 3", got, pages, want)
	}

	for _, q := range []string{"?cursor=garbage", "?cursor=" + url.QueryEscape(first) + "&kind=approval"} {
		if code, m := call(t, srv, "GET", "/v1/pending"+q, viewerToken, ""); code != 400 || errCode(m) != "bad_cursor" || !strings.Contains(errMessage(m), "not a cursor of this list") {
			t.Errorf("pending%s: %d %v, want 400 bad_cursor", q, code, m)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=-3", "?limit=two"} {
		if code, m := call(t, srv, "GET", "/v1/pending"+q, viewerToken, ""); code != 400 || errCode(m) != "bad_request" {
			t.Errorf("pending%s: %d %v, want 400 bad_request", q, code, m)
		}
	}

	// The inbox: the same calls, two a page, by its links.
	c := clientWith(t, srv, viewerToken)
	got, pages = nil, 0
	taskOf := regexp.MustCompile(`data-task="([0-9A-Z]{26})"`)
	for u := srv.URL + "/?limit=2"; ; pages++ {
		resp, body := send(t, c, "GET", u, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", u, resp.StatusCode, body)
		}
		for _, m := range taskOf.FindAllStringSubmatch(body, -1) {
			if !slices.Contains(got, m[1]) {
				got = append(got, m[1])
			}
		}
		m := nextLink.FindStringSubmatch(body)
		if m == nil {
			break
		}
		u = srv.URL + strings.ReplaceAll(m[1], "&amp;", "&")
		if pages > 5 {
			t.Fatal("the inbox's pages never end")
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || pages != 2 {
		t.Errorf("the inbox's pages showed %v in %d links, want %v in 2", got, pages, want)
	}
	if resp, body := send(t, c, "GET", srv.URL+"/?cursor=garbage", nil, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "not a cursor of this list") {
		t.Errorf("the inbox with a garbled cursor: %d", resp.StatusCode)
	}
}

// conversationsPage is an answer of GET /v1/conversations.
type conversationsPage struct {
	Conversations []struct {
		ConversationID string `json:"conversation_id"`
		Status         string `json:"status"`
	} `json:"conversations"`
	Next string `json:"next"`
}

// GET /v1/conversations and the conversations page are read page by page
// (SPEC §21), the latest changed first: each conversation once across the
// pages, by the API's next and the page's "Older" link (plain HTML),
// which keeps the status tab; the tabs count from the index; a cursor of
// another status, or a garbled one, is 400 bad_cursor.
func TestConversationsPages(t *testing.T) {
	b := servetest.Setup(t)
	r := b.Replica(t, "r1")
	srv := inboxServer(t, r)
	var want []string
	for range 5 {
		code, final := call(t, srv, "POST", "/v1/conversations?wait=1", adminToken, `{"agent":"ops","prompt":"deploy prod"}`)
		if code != 200 || final["status"] != "paused" {
			t.Fatalf("start: %d %v", code, final)
		}
		want = append([]string{final["conversation_id"].(string)}, want...) // the latest first
	}
	var got []string
	path, first := "/v1/conversations?status=paused&limit=2", ""
	for pages := 0; ; pages++ {
		var page conversationsPage
		if code := callJSON(t, srv, "GET", path, viewerToken, "", &page); code != 200 || len(page.Conversations) > 2 {
			t.Fatalf("%s: %d %+v", path, code, page)
		}
		for _, c := range page.Conversations {
			got = append(got, c.ConversationID)
		}
		if page.Next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("the pages never end")
		}
		first = cmp.Or(first, page.Next)
		path = "/v1/conversations?status=paused&limit=2&cursor=" + url.QueryEscape(page.Next)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the API's pages listed %v, want %v", got, want)
	}
	for _, q := range []string{"?cursor=garbage", "?status=failed&cursor=" + url.QueryEscape(first)} {
		if code, m := call(t, srv, "GET", "/v1/conversations"+q, viewerToken, ""); code != 400 || errCode(m) != "bad_cursor" {
			t.Errorf("conversations%s: %d %v, want 400 bad_cursor", q, code, m)
		}
	}

	c := clientWith(t, srv, viewerToken)
	rowOf := regexp.MustCompile(`<tr id="conv-([0-9A-Z]{26})"`)
	got = nil
	links := 0
	for u := srv.URL + "/conversations?status=paused&limit=2"; ; links++ {
		resp, body := send(t, c, "GET", u, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", u, resp.StatusCode, body)
		}
		if links == 0 && !strings.Contains(body, `paused <span class="meta">5</span>`) {
			t.Errorf("the paused tab does not count 5: %s", body)
		}
		for _, m := range rowOf.FindAllStringSubmatch(body, -1) {
			got = append(got, m[1])
		}
		m := olderLink.FindStringSubmatch(body)
		if m == nil {
			break
		}
		u = srv.URL + strings.ReplaceAll(m[1], "&amp;", "&")
		if links > 5 {
			t.Fatal("the conversations' pages never end")
		}
	}
	if !slices.Equal(got, want) || links != 2 {
		t.Errorf("the conversations page showed %v by %d links, want %v by 2", got, links, want)
	}
}

// olderLink is the conversations page's link to its next page.
var olderLink = regexp.MustCompile(`<a id="next-page" rel="next" href="([^"]+)">Older</a>`)
