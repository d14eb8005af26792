package a2aface

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	neturl "net/url"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/offload-dev/offload/pkg/protocol"
)

// PushOptions configure the face's push notifications (SPEC §17): a
// task's configs are kept in its record; every replica sweeps the tasks
// watched, and the one that claims a change (compare-and-set on the
// record, with a lease) POSTs the task to each config's URL, retried
// with backoff; a claim whose replica died lapses and another replica
// sends it again (at least once).
type PushOptions struct {
	// Allow are the networks push URLs may reach although they are
	// loopback, private, link-local or otherwise not public (SSRF: they
	// are refused at creation when literal and at connect time always).
	Allow []netip.Prefix
	// Holder names this replica in the claims. Defaults to a new ID.
	Holder string
	// Sweep is how often the watched tasks are read. Defaults to 2 s.
	Sweep time.Duration
	// Lease is how long a claim holds before another replica may send
	// the change again. Defaults to 2 min.
	Lease time.Duration
	// Attempts bounds the attempts at each URL of one change (the first
	// included). Defaults to 5.
	Attempts int
	// Backoff is the wait before the first retry, doubled before each
	// next one. Defaults to 1 s.
	Backoff time.Duration
	// Timeout bounds one attempt. Defaults to 10 s.
	Timeout time.Duration
}

// pushMax bounds a task's push configs; pushURLMax and pushTokenMax the
// size of a config's URL and token (the record is one value of the
// store); pushAnswerMax what is read of a receiver's answer.
const (
	pushMax       = 8
	pushURLMax    = 2048
	pushTokenMax  = 1024
	pushAnswerMax = 64 << 10
)

// PushClaim is a replica's claim to send a task's change: the change's
// key, the replica, and when the claim lapses.
type PushClaim struct {
	Key   string    `json:"key"`
	By    string    `json:"by"`
	Until time.Time `json:"until"`
}

// pushes is what sends a face's push notifications.
type pushes struct {
	o      PushOptions
	client *http.Client
	mu     sync.Mutex
	busy   map[string]bool // owner/id being sent by this replica
}

func newPushes(o PushOptions) *pushes {
	if o.Holder == "" {
		o.Holder = protocol.NewID()
	}
	if o.Sweep <= 0 {
		o.Sweep = 2 * time.Second
	}
	if o.Lease <= 0 {
		o.Lease = 2 * time.Minute
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	return &pushes{o: o, client: guardedClient(o.Allow, o.Timeout), busy: map[string]bool{}}
}

// ErrPushAddress is the error of a push URL to an address not allowed.
var ErrPushAddress = errors.New("a2aface: push URL address not allowed")

// allowed reports whether a push may reach ip: a public address, or one
// of allow's.
func allowed(ip netip.Addr, allow []netip.Prefix) bool {
	ip = ip.Unmap()
	for _, p := range allow {
		if p.Contains(ip) {
			return true
		}
	}
	return ip.IsGlobalUnicast() && !ip.IsPrivate() && !cgnat.Contains(ip)
}

// cgnat is the shared address space (RFC 6598), not public either.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// guardedClient is the client of the pushes: every connection's address
// checked when it is made (a name resolving to a refused address
// included), no proxy, no redirect followed, each attempt bounded.
func guardedClient(allow []netip.Prefix, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrPushAddress, address)
		}
		if !allowed(ap.Addr(), allow) {
			return fmt.Errorf("%w: %s", ErrPushAddress, ap.Addr())
		}
		return nil
	}}
	tr := &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout,
		MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// checkPush checks config c as a client sent it: an http(s) URL, whose
// host, when an address, is allowed.
func (p *pushes) checkPush(c *a2a.PushConfig) error {
	u, err := neturl.Parse(c.URL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%w: the push URL is not an http(s) URL", a2a.ErrInvalidParams)
	case len(c.URL) > pushURLMax:
		return fmt.Errorf("%w: the push URL is over %d bytes", a2a.ErrInvalidParams, pushURLMax)
	case len(c.Token) > pushTokenMax || c.Auth != nil && len(c.Auth.Credentials) > pushTokenMax:
		return fmt.Errorf("%w: the push token is over %d bytes", a2a.ErrInvalidParams, pushTokenMax)
	case len(c.ID) > 128:
		return fmt.Errorf("%w: the push config's ID is over 128 bytes", a2a.ErrInvalidParams)
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && !allowed(ip, p.o.Allow) {
		return fmt.Errorf("%w: push URL %s: %s is not a public address (agent serve --a2a-push-allow allows a network): %w",
			a2a.ErrInvalidParams, c.URL, ip, ErrPushAddress)
	}
	if u.Hostname() == "localhost" && !allowed(netip.AddrFrom4([4]byte{127, 0, 0, 1}), p.o.Allow) {
		return fmt.Errorf("%w: push URL %s: localhost is not a public address: %w", a2a.ErrInvalidParams, c.URL, ErrPushAddress)
	}
	return nil
}

// pushKey names a change of t the pushes send: its state, and for
// INPUT_REQUIRED when it was reached (a task may wait more than once; it
// ends once); "" for a state not sent (SUBMITTED and WORKING: the pushes
// say when a task waits for input or has ended).
func pushKey(t *a2a.Task) string {
	switch {
	case t.Status.State.Terminal():
		return string(t.Status.State)
	case t.Status.State != a2a.TaskStateInputRequired:
		return ""
	}
	at := ""
	if t.Status.Timestamp != nil {
		at = t.Status.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	return string(t.Status.State) + "@" + at
}

// RunPushes sweeps the tasks watched for push notifications until ctx
// ends, and returns once the notifications under way have stopped. It
// returns at once when the face sends none (Config.Push nil).
func (f *Face) RunPushes(ctx context.Context) {
	if f.push == nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(f.push.o.Sweep)
	defer tick.Stop()
	for {
		f.sweepPushes(ctx, &wg)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sweepPushes reads each watched task and sends, on a goroutine of wg,
// the change of each it claims.
func (f *Face) sweepPushes(ctx context.Context, wg *sync.WaitGroup) {
	type ref struct{ owner, id string }
	var refs []ref
	if err := f.cfg.Tasks.Watched(ctx, func(owner, id string) { refs = append(refs, ref{owner, id}) }); err != nil {
		f.cfg.Logger.Warn("a2aface: the tasks watched for pushes", "error", err)
		return
	}
	for _, r := range refs {
		if ctx.Err() != nil {
			return
		}
		name := r.owner + "/" + r.id
		f.push.mu.Lock()
		busy := f.push.busy[name]
		f.push.mu.Unlock()
		if busy {
			continue
		}
		rec, t, key, err := f.claimPush(ctx, r.owner, r.id)
		if err != nil {
			f.cfg.Logger.Warn("a2aface: a task watched for pushes", "task", r.id, "error", err)
			continue
		}
		if rec == nil {
			continue
		}
		f.push.mu.Lock()
		f.push.busy[name] = true
		f.push.mu.Unlock()
		wg.Go(func() {
			defer func() {
				f.push.mu.Lock()
				delete(f.push.busy, name)
				f.push.mu.Unlock()
			}()
			f.sendPush(ctx, rec, t, key)
		})
	}
}

// claimPush reads owner's task id and claims its change when it is one
// to send, not sent yet, and not claimed by a live claim: it returns the
// record as claimed, the task and the change's key (a nil record:
// nothing to send). A task that has ended and whose end was sent, or
// that has no config, is no longer watched.
func (f *Face) claimPush(ctx context.Context, owner, id string) (*Record, *a2a.Task, string, error) {
	rec, _, err := f.tasks.get(ctx, owner, id)
	if err != nil {
		return nil, nil, "", err
	}
	t, err := f.task(ctx, rec)
	if err != nil {
		return nil, nil, "", err
	}
	key := pushKey(t)
	if len(rec.Push) == 0 || key != "" && rec.Pushed == key && t.Status.State.Terminal() {
		return nil, nil, "", f.cfg.Tasks.Unwatch(ctx, owner, id)
	}
	if key == "" || rec.Pushed == key {
		return nil, nil, "", nil
	}
	now := f.cfg.Now()
	claimed := false
	rec, err = f.write(ctx, owner, id, func(r *Record) bool {
		claimed = false
		if r.Pushed == key || r.Claim != nil && r.Claim.Key == key && now.Before(r.Claim.Until) {
			return false
		}
		r.Claim, claimed = &PushClaim{Key: key, By: f.push.o.Holder, Until: now.Add(f.push.o.Lease)}, true
		return true
	}, false)
	if err != nil || !claimed {
		return nil, nil, "", err
	}
	return rec, t, key, nil
}

// sendPush POSTs task t to each of rec's configs, each up to Attempts
// times with a doubling backoff, then records its change key sent (the
// claim's end). Stopped before, it records nothing: the claim lapses and
// another replica sends the change.
func (f *Face) sendPush(ctx context.Context, rec *Record, t *a2a.Task, key string) {
	t.History = nil
	body, err := json.Marshal(a2a.StreamResponse{Event: t})
	if err != nil {
		f.cfg.Logger.Error("a2aface: encode a push", "task", rec.ID, "error", err)
		return
	}
	for _, c := range rec.Push {
		delay := f.push.o.Backoff
		for attempt := 1; ; attempt++ {
			err := f.postPush(ctx, c, body)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if attempt >= f.push.o.Attempts || errors.Is(err, ErrPushAddress) {
				f.cfg.Logger.Error("a2aface: push failed; given up", "task", rec.ID, "config", c.ID, "attempts", attempt, "error", err)
				break
			}
			f.cfg.Logger.Warn("a2aface: push failed; retried", "task", rec.ID, "config", c.ID, "attempt", attempt, "in", delay, "error", err)
			tm := time.NewTimer(delay)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				return
			}
			delay *= 2
		}
	}
	_, err = f.write(context.WithoutCancel(ctx), rec.Owner, rec.ID, func(r *Record) bool {
		if r.Pushed == key {
			return false
		}
		r.Pushed = key
		if r.Claim != nil && r.Claim.Key == key {
			r.Claim = nil
		}
		return true
	}, false)
	if err != nil {
		f.cfg.Logger.Warn("a2aface: a push sent not recorded (it is sent again)", "task", rec.ID, "error", err)
	}
}

// postPush POSTs body to config c's URL with its token
// (A2A-Notification-Token, and X-A2A-Notification-Token as the JS SDK
// reads it) and its credentials (Authorization); an answer other than
// 2xx is an error.
func (f *Face) postPush(ctx context.Context, c *a2a.PushConfig, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "offload-agent-serve")
	if c.Token != "" {
		req.Header.Set("A2A-Notification-Token", c.Token)
		req.Header.Set("X-A2A-Notification-Token", c.Token)
	}
	if c.Auth != nil && c.Auth.Credentials != "" {
		req.Header.Set("Authorization", c.Auth.Scheme+" "+c.Auth.Credentials)
	}
	resp, err := f.push.client.Do(req)
	if ue := (*neturl.Error)(nil); errors.As(err, &ue) {
		return ue.Err // without the URL: it may hold a secret
	}
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, pushAnswerMax))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// pushConfig returns rec's config id, or not found.
func pushConfig(rec *Record, id string) (*a2a.PushConfig, error) {
	i := slices.IndexFunc(rec.Push, func(c *a2a.PushConfig) bool { return c.ID == id })
	if i < 0 {
		return nil, fmt.Errorf("%w: push config %q of task %s", a2a.ErrTaskNotFound, id, rec.ID)
	}
	return rec.Push[i], nil
}
