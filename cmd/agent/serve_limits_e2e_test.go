package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowCut is the bound within which agent serve cuts a slow or idle
// client (SECURITY.md).
const slowCut = 30 * time.Second

// dialHTTP connects to the HTTP face of url.
func dialHTTP(t *testing.T, url string) net.Conn {
	t.Helper()
	var d net.Dialer
	c, err := d.DialContext(t.Context(), "tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// cutAfter reads c until the server closes it, trickling a byte of
// trickle every second meanwhile when set, and returns how long that
// took from start; it gives up (and says so) after twice slowCut.
func cutAfter(c net.Conn, start time.Time, trickle string) (time.Duration, error) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	if trickle != "" {
		wg.Go(func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for i := 0; ; i = (i + 1) % len(trickle) {
				select {
				case <-done:
					return
				case <-t.C:
				}
				if _, err := c.Write([]byte{trickle[i]}); err != nil {
					return
				}
			}
		})
	}
	_ = c.SetReadDeadline(start.Add(2 * slowCut))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, fmt.Errorf("still open after %v", 2*slowCut)
	}
	return time.Since(start), nil
}

// The attack of issue 37 (no read, idle or connection limits): slow
// bodies and idle keep-alives were held until descriptors ran out. On
// the agent binary: a client trickling its headers, one trickling a
// form's body to /login, and an idle kept-alive connection are each cut
// within 30 s. With --max-connections 6 held by clients that never finish
// their headers, a seventh connection is not served until the server has
// cut one of them, then it is: the server recovers.
func TestServeCutsSlowClients(t *testing.T) {
	w := newServeWorld(t)
	_, url1 := w.replica(t)
	_, url2 := w.replica(t, "--max-connections", "6")
	var wg sync.WaitGroup
	check := func(name string, took time.Duration, err error) {
		switch {
		case err != nil:
			t.Errorf("%s: %v, want it cut within %v", name, err, slowCut)
		case took > slowCut:
			t.Errorf("%s: cut after %v, want within %v", name, took, slowCut)
		}
	}
	slowHeaders, slowBody, idle := dialHTTP(t, url1), dialHTTP(t, url1), dialHTTP(t, url1)
	held := make([]net.Conn, 6)
	for i := range held {
		held[i] = dialHTTP(t, url2)
	}
	wg.Go(func() {
		c := slowHeaders
		start := time.Now()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Error(err)
			return
		}
		took, err := cutAfter(c, start, "X-Slow: 1\r\n")
		check("headers trickled", took, err)
	})
	wg.Go(func() {
		c := slowBody
		start := time.Now()
		if _, err := io.WriteString(c, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\ntoken="); err != nil {
			t.Error(err)
			return
		}
		took, err := cutAfter(c, start, "abcdefgh")
		check("a body trickled", took, err)
	})
	wg.Go(func() {
		c := idle
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Error(err)
			return
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		start := time.Now() // idle from here
		_ = c.SetReadDeadline(start.Add(2 * slowCut))
		_, err = io.Copy(io.Discard, br)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = fmt.Errorf("still open after %v", 2*slowCut)
		}
		check("an idle keep-alive", time.Since(start), err)
	})
	wg.Go(func() {
		for i := range held {
			if _, err := io.WriteString(held[i], "GET /healthz HTTP/1.1\r\n"); err != nil {
				t.Error(err)
				return
			}
		}
		// The seventh: answered only once a held connection was cut.
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url2+"/healthz", nil)
		if err != nil {
			t.Error(err)
			return
		}
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			t.Errorf("the seventh connection: %v", err)
			return
		}
		_ = resp.Body.Close()
		cut := 0
		for _, c := range held {
			// A connection the server closed has its end here already.
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) {
				cut++
			}
		}
		if resp.StatusCode != http.StatusOK || cut == 0 {
			t.Errorf("the seventh connection answered %d while the 6 held were open (%d cut), want 200 once one was cut", resp.StatusCode, cut)
		}
	})
	wg.Wait()
	// Recovered: the API answers.
	if code, m := api(t, "GET", url2+"/v1/pending", serveViewer, ""); code != 200 {
		t.Errorf("GET /v1/pending after: %d %v", code, m)
	}
}
