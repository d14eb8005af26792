package a2aface_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/a2atest"
	"github.com/offload-dev/offload/pkg/a2aface"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
)

// push is one notification a receiver got: the task's state and the
// config's token.
type push struct {
	ID, State, Token string
}

// receiver is a loopback push receiver: it answers 503 to its first
// fail requests (hangs until the sender gives up when hang), then 200,
// and gives each notification it took on got.
type receiver struct {
	srv      *httptest.Server
	got      chan push
	mu       sync.Mutex
	fail     int
	hang     bool
	attempts int
	hung     chan struct{}
}

func newReceiver(t *testing.T, fail int, hang bool) *receiver {
	r := &receiver{got: make(chan push, 64), fail: fail, hang: hang, hung: make(chan struct{}, 8)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.attempts++
		n, hang := r.attempts, r.hang
		r.hang = false
		r.mu.Unlock()
		if hang {
			r.hung <- struct{}{}
			<-req.Context().Done() // the sender stopped
			return
		}
		if n <= r.fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var sr struct {
			Task struct {
				ID     string `json:"id"`
				Status struct {
					State string `json:"state"`
				} `json:"status"`
			} `json:"task"`
		}
		if err := json.Unmarshal(body, &sr); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		select {
		case r.got <- push{ID: sr.Task.ID, State: sr.Task.Status.State, Token: req.Header.Get("X-A2A-Notification-Token")}:
		case <-req.Context().Done():
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// wait returns the first notification of state the receiver takes
// (others before it skipped), or fails the test.
func (r *receiver) wait(t *testing.T, state string) push {
	t.Helper()
	timeout := time.After(servetest.Wait)
	for {
		select {
		case p := <-r.got:
			if p.State == state {
				return p
			}
		case <-timeout:
			t.Fatalf("no push of %s", state)
		}
	}
}

// pushOptions are the tests' pushes: loopback allowed, a quick sweep
// and backoff.
func pushOptions(holder string, lease time.Duration) *a2aface.PushOptions {
	return &a2aface.PushOptions{Holder: holder, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		Sweep: 20 * time.Millisecond, Backoff: 10 * time.Millisecond, Lease: lease}
}

// TestPushTwoReplicas: the JS client sets a push config on a task on
// one replica (the card declares pushes); the task pauses and, on a
// decision sent to the other replica, completes; the receiver, failing
// its first two attempts (503), gets the INPUT_REQUIRED and the
// COMPLETED notifications with the config's token. The config is read,
// listed and deleted on either replica, by its token only; a push URL to
// an address not allowed is refused at creation.
func TestPushTwoReplicas(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{A2A: true, A2APush: pushOptions("a", time.Minute)})
	srvB, _ := b.Face(t, tokens, agentproc.FaceOptions{A2A: true, A2APush: pushOptions("b", time.Minute)})
	rc := newReceiver(t, 2, false)
	ctx := t.Context()

	card := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Op: "card"})
	if caps, _ := card.Result["capabilities"].(map[string]any); caps["pushNotifications"] != true {
		t.Fatalf("card: %v", card.Result)
	}
	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy web"})
	task := res.Task()
	if res.Error != "" || a2atest.State(task) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("send: %q %v", res.Error, res.Result)
	}
	id, ctxID := task["id"].(string), task["contextId"].(string)
	for _, bad := range []string{"http://169.254.169.254/latest/meta-data", "http://10.0.0.7/hook", "http://[fd00::1]/hook", "ftp://example.com/"} {
		res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "push-create", TaskID: id, PushURL: bad})
		if res.Error == "" {
			t.Fatalf("push to %s: created %v", bad, res.Result)
		}
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "push-create", TaskID: id, PushURL: rc.srv.URL + "/hook", PushToken: "tok-1"})
	cfgID, _ := res.Result["id"].(string)
	if res.Error != "" || cfgID == "" || res.Result["token"] != "tok-1" {
		t.Fatalf("push-create: %q %v", res.Error, res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "push-get", TaskID: id, PushID: cfgID})
	if res.Error != "" || res.Result["url"] != rc.srv.URL+"/hook" || res.Result["token"] != "tok-1" {
		t.Fatalf("push-get: %q %v", res.Error, res.Result)
	}
	for _, op := range []string{"push-get", "push-list", "push-delete"} {
		res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: another, Op: op, TaskID: id, PushID: cfgID})
		if !strings.Contains(strings.ToLower(res.Error), "not found") {
			t.Fatalf("another token's %s: %q %v", op, res.Error, res.Result)
		}
	}

	if p := rc.wait(t, "TASK_STATE_INPUT_REQUIRED"); p.ID != id || p.Token != "tok-1" {
		t.Fatalf("push: %+v", p)
	}
	rc.mu.Lock()
	attempts := rc.attempts
	rc.mu.Unlock()
	if attempts < 3 {
		t.Fatalf("attempts: %d, want the two 503s retried", attempts)
	}
	pend := pendingOf(t, task)
	decision := map[string]any{"decisions": []any{map[string]any{"task_id": pend[0]["task_id"], "approved": true}}}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "send", TaskID: id, ContextID: ctxID, Data: decision})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_COMPLETED" {
		t.Fatalf("decision: %q %v", res.Error, res.Result)
	}
	if p := rc.wait(t, "TASK_STATE_COMPLETED"); p.ID != id || p.Token != "tok-1" {
		t.Fatalf("push: %+v", p)
	}

	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "push-list", TaskID: id})
	if cs, _ := res.Result["configs"].([]any); res.Error != "" || len(cs) != 1 {
		t.Fatalf("push-list: %q %v", res.Error, res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvB.URL + "/a2a/ops/", Token: admin, Op: "push-delete", TaskID: id, PushID: cfgID})
	if res.Error != "" {
		t.Fatalf("push-delete: %q", res.Error)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "push-list", TaskID: id})
	if cs, _ := res.Result["configs"].([]any); res.Error != "" || len(cs) != 0 {
		t.Fatalf("push-list after delete: %q %v", res.Error, res.Result)
	}
}

// TestPushClaimLapsed: the replica that claimed a notification stops
// while it sends it (the receiver never answers); once its claim lapses,
// another replica sends it.
func TestPushClaimLapsed(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a, b := w.Replica(t, "a"), w.Replica(t, "b")
	srvA, faceA := a.Face(t, tokens, agentproc.FaceOptions{A2A: true, A2APush: pushOptions("a", time.Second)})
	rc := newReceiver(t, 0, true)
	ctx := t.Context()

	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy web"})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("send: %q %v", res.Error, res.Result)
	}
	id := res.Task()["id"].(string)
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "push-create", TaskID: id, PushURL: rc.srv.URL, PushToken: "tok-2"})
	if res.Error != "" {
		t.Fatalf("push-create: %q", res.Error)
	}
	select {
	case <-rc.hung: // a claimed it and is sending
	case <-time.After(servetest.Wait):
		t.Fatal("no push from a")
	}
	faceA.Stop() // a's sweep and its sending stop: its claim is left to lapse
	b.Face(t, tokens, agentproc.FaceOptions{A2A: true, A2APush: pushOptions("b", time.Second)})
	if p := rc.wait(t, "TASK_STATE_INPUT_REQUIRED"); p.ID != id || p.Token != "tok-2" {
		t.Fatalf("push: %+v", p)
	}
}

// TestPushWithSend: a message's configuration.taskPushNotificationConfig
// is its task's push config (its first change sent); one to an address
// not allowed refuses the message, starting nothing.
func TestPushWithSend(t *testing.T) {
	a2atest.Script(t)
	w := servetest.Setup(t)
	a := w.Replica(t, "a")
	srvA, _ := a.Face(t, tokens, agentproc.FaceOptions{A2A: true, A2APush: pushOptions("a", time.Minute)})
	rc := newReceiver(t, 0, false)
	ctx := t.Context()

	res := a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy db", PushURL: "http://192.168.0.9/hook"})
	if !strings.Contains(res.Error, "not a public address") || deploys(w, "db") != 0 {
		t.Fatalf("send with a private push URL: %q %v", res.Error, res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "list"})
	if res.Error != "" || len(tasksOf(res)) != 0 {
		t.Fatalf("list: %q %v", res.Error, res.Result)
	}
	res = a2atest.Do(ctx, t, a2atest.Request{URL: srvA.URL + "/a2a/ops/", Token: admin, Op: "send", Text: "deploy db", PushURL: rc.srv.URL, PushToken: "tok-3"})
	if res.Error != "" || a2atest.State(res.Task()) != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("send: %q %v", res.Error, res.Result)
	}
	if p := rc.wait(t, "TASK_STATE_INPUT_REQUIRED"); p.ID != res.Task()["id"] || p.Token != "tok-3" {
		t.Fatalf("push: %+v", p)
	}
}
