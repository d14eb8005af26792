package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/links"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/serve/notify"
	"github.com/offload-dev/offload/pkg/natsjs/serve/servetest"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// receiver is a notification receiver on loopback: it keeps every POST's
// body and answers each with the next of its codes (then 200).
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	codes []int
	got   []string
	posts chan string
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	t.Helper()
	return newSlowReceiver(t, 0, codes...)
}

// newSlowReceiver is newReceiver taking delay to answer each POST.
func newSlowReceiver(t *testing.T, delay time.Duration, codes ...int) *receiver {
	t.Helper()
	rc := &receiver{codes: codes, posts: make(chan string, 64)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay) // a slow webhook (0: none)
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
		}
		rc.mu.Lock()
		code := http.StatusOK
		if len(rc.codes) > 0 {
			code, rc.codes = rc.codes[0], rc.codes[1:]
		}
		rc.got = append(rc.got, string(body))
		rc.mu.Unlock()
		w.WriteHeader(code)
		select {
		case rc.posts <- string(body):
		default: // more POSTs than any test awaits: bodies() has them all
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) bodies() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.got...)
}

// startNotifier starts a notifier (one replica's) sending to receivers,
// with signed links, the expiry of replica r's approvals (r nil: none),
// stopped when the test ends.
func startNotifier(t *testing.T, b *servetest.World, r *servetest.Replica, m *metrics.Notify, receivers ...notify.Receiver) *notify.Notifier {
	t.Helper()
	js := b.Srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
	defer cancel()
	prov := natsjs.ProvisionOptions{AckWait: 2 * time.Second}
	store, err := convstore.New(ctx, convstore.Config{JetStream: js, Provision: prov, Logger: servetest.Logger(), LeaseTTL: servetest.LeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	links, err := convstore.OpenLinks(ctx, convstore.OpenConfig{JetStream: js, Provision: prov})
	if err != nil {
		t.Fatal(err)
	}
	cfg := notify.Config{JetStream: js, Provision: prov, Receivers: receivers, PublicURL: "https://agents.example.com/",
		Store: store, Links: links, Attempts: 3, Backoff: 10 * time.Millisecond, Logger: servetest.Logger(), Metrics: m}
	if r != nil {
		cfg.Expiry = r.Svc.ApprovalTimeout
	}
	n, err := notify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	return n
}

// settled waits until the notification consumer has nothing pending nor
// unacked: every notification is sent (or given up) and acked. The
// consumer's state has no signal; it is polled.
func settled(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	offloadtest.Eventually(t, "the notification consumer acked everything", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
		defer cancel()
		c, err := js.Consumer(ctx, "TOOLS_APPROVALS", natsjs.NotifyConsumerName)
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("%d pending, %d unacked", info.NumPending, info.NumAckPending)
		}
		return nil
	})
}

// With two replicas running, each with a notifier, every announcement and
// every resolution is POSTed once, with SPEC §12's JSON.
func TestNotifyOncePerAnnouncementAndResolution(t *testing.T) {
	b := servetest.Setup(t)
	rc := newReceiver(t)
	recv := notify.Receiver{URL: rc.srv.URL + "/hook"}
	startNotifier(t, b, nil, nil, recv)
	startNotifier(t, b, nil, nil, recv)
	r1, r2 := b.Replica(t, "r1"), b.Replica(t, "r2")
	targets := []string{"a", "b", "c", "d"}
	tasks := map[string]string{} // task → conversation
	for i, target := range targets {
		r := []*servetest.Replica{r1, r2}[i%2]
		f := r.Start(t, "deploy "+target)
		tasks[servetest.Paused(t, f)] = f.ConversationID
	}
	for task, conv := range tasks {
		b.Decide(t, r1.JS, conv, task)
	}
	for range targets {
		offloadtest.WaitOrTimeout(t, b.Finished, "a conversation continued")
	}
	for range 2 * len(targets) {
		offloadtest.WaitOrTimeout(t, rc.posts, "a notification")
	}
	settled(t, r1.JS)
	seen := map[string]int{}
	for _, body := range rc.bodies() {
		var note map[string]any
		if err := json.Unmarshal([]byte(body), &note); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		task, _ := note["task_id"].(string)
		seen[note["event"].(string)+" "+task]++
		links, _ := note["links"].(map[string]any)
		args, _ := note["args"].(map[string]any)
		if note["conversation_id"] != tasks[task] || note["tool"] != "deploy" || note["agent"] != "ops" || args["target"] == nil ||
			links["inbox"] != "https://agents.example.com/" {
			t.Errorf("notification %s", body)
		}
		approve, _ := links["approve"].(string)
		if requested := note["event"] == notify.EventApprovalRequested; requested != strings.HasPrefix(approve, "https://agents.example.com/links/") ||
			requested != (links["deny"] != nil) {
			t.Errorf("%s's links %v: approve/deny signed links on a request only", note["event"], links)
		}
		if v, ok := note["expires_at"]; !ok || v != nil {
			t.Errorf("expires_at: %v (present %v), want null", v, ok)
		}
		if note["event"] == notify.EventApprovalResolved && (note["resolved"] != "approved" || note["by"] != "ann") {
			t.Errorf("resolution %s", body)
		}
	}
	for task := range tasks {
		for _, event := range []string{notify.EventApprovalRequested, notify.EventApprovalResolved} {
			if seen[event+" "+task] != 1 {
				t.Errorf("%s of task %s POSTed %d times, want once (all: %v)", event, task, seen[event+" "+task], seen)
			}
		}
	}
	if len(rc.bodies()) != 2*len(targets) {
		t.Errorf("%d POSTs, want %d", len(rc.bodies()), 2*len(targets))
	}
}

// announce publishes an announcement of a new task of tool deploy, as a
// run does, and returns its task; with again, it publishes it a second
// time, as a later session announcing the call still pending does
// (beyond the duplicate window: no Nats-Msg-Id).
func announce(t *testing.T, js jetstream.JetStream, again bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), servetest.Wait)
	defer cancel()
	conv, task := protocol.NewID(), protocol.NewID()
	data, _ := json.Marshal(protocol.Approval{TaskID: task, Tool: "deploy", Args: json.RawMessage(`{"target":"<prod> & co"}`), ConversationID: conv})
	times := 1
	if again {
		times = 2
	}
	for range times {
		if _, err := js.Publish(ctx, protocol.Subjects{}.Approval(conv, task), data); err != nil {
			t.Fatal(err)
		}
	}
	return task
}

// An announcement repeated on its subject (a later session announcing a
// call still pending) is not notified again.
func TestNotifyAnnouncedAgain(t *testing.T) {
	b := servetest.Setup(t)
	rc := newReceiver(t)
	startNotifier(t, b, nil, nil, notify.Receiver{URL: rc.srv.URL})
	js := b.Srv.JetStream(t)
	task := announce(t, js, true)
	offloadtest.WaitOrTimeout(t, rc.posts, "the notification")
	settled(t, js)
	if got := rc.bodies(); len(got) != 1 || !strings.Contains(got[0], task) {
		t.Errorf("POSTs %q, want the announcement once", got)
	}
}

func notifyCount(t *testing.T, m *metrics.Notify, kind, outcome string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.NotificationsTotal.WithLabelValues(kind, outcome).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// A receiver that fails is tried again with a backoff until it answers
// 2xx; one that keeps failing is given up after the last attempt, counted
// and the message acked, while a good receiver gets its notification once.
func TestNotifyRetries(t *testing.T) {
	b := servetest.Setup(t)
	flaky := newReceiver(t, http.StatusInternalServerError, http.StatusBadGateway)
	broken := newReceiver(t, 500, 500, 500)
	m := metrics.NewNotify(nil)
	startNotifier(t, b, nil, m, notify.Receiver{URL: flaky.srv.URL}, notify.Receiver{URL: broken.srv.URL})
	js := b.Srv.JetStream(t)
	task := announce(t, js, false)
	for range 3 {
		offloadtest.WaitOrTimeout(t, flaky.posts, "an attempt at the flaky receiver")
		offloadtest.WaitOrTimeout(t, broken.posts, "an attempt at the broken receiver")
	}
	settled(t, js)
	if got := flaky.bodies(); len(got) != 3 || got[0] != got[2] || !strings.Contains(got[2], task) {
		t.Errorf("flaky receiver got %q, want the notification 3 times", got)
	}
	if got := len(broken.bodies()); got != 3 {
		t.Errorf("broken receiver got %d attempts, want 3 (Attempts)", got)
	}
	for _, c := range []struct {
		outcome string
		want    float64
	}{{metrics.NotifySent, 1}, {metrics.NotifyRetried, 4}, {metrics.NotifyFailed, 1}} {
		if got := notifyCount(t, m, "webhook", c.outcome); got != c.want {
			t.Errorf("offload_notifications_total{outcome=%q} = %v, want %v", c.outcome, got, c.want)
		}
	}
}

// --notify slack:URL sends a Slack incoming webhook's message: text with
// the tool, the arguments escaped for mrkdwn and the inbox's link.
func TestNotifySlack(t *testing.T) {
	b := servetest.Setup(t)
	rc := newReceiver(t)
	recv, err := notify.ParseReceiver("slack:" + rc.srv.URL + "/services/T/B/X")
	if err != nil || !recv.Slack {
		t.Fatalf("ParseReceiver: %+v, %v", recv, err)
	}
	startNotifier(t, b, nil, nil, recv)
	task := announce(t, b.Srv.JetStream(t), false)
	body := offloadtest.WaitOrTimeout(t, rc.posts, "the Slack message")
	var msg map[string]string
	if err := json.Unmarshal([]byte(body), &msg); err != nil || len(msg) != 1 {
		t.Fatalf("Slack message %s: %v, want only text", body, err)
	}
	text := msg["text"]
	for _, want := range []string{"Approval requested: *deploy*", "task " + task, "&lt;prod&gt; &amp; co", "<https://agents.example.com/|Open the inbox>"} {
		if !strings.Contains(text, want) {
			t.Errorf("text %q lacks %q", text, want)
		}
	}
	for _, bad := range []string{"ftp://x", "slack:", "hooks.slack.com/x"} {
		if _, err := notify.ParseReceiver(bad); err == nil {
			t.Errorf("ParseReceiver(%q) accepted", bad)
		}
	}
}

// Receivers that are slow in turn keep the message in progress: each
// attempt renews the ack wait (2 s here), so that three receivers taking
// 1 s each get the notification once, not again on a redelivery. The
// slowness is the receivers' own (a slow webhook), hence the sleep.
func TestNotifySlowReceivers(t *testing.T) {
	b := servetest.Setup(t)
	var receivers []notify.Receiver
	var all []*receiver
	for range 3 {
		rc := newSlowReceiver(t, time.Second)
		receivers, all = append(receivers, notify.Receiver{URL: rc.srv.URL}), append(all, rc)
	}
	startNotifier(t, b, nil, nil, receivers...)
	js := b.Srv.JetStream(t)
	announce(t, js, false)
	for _, rc := range all {
		offloadtest.WaitOrTimeout(t, rc.posts, "the notification at a slow receiver")
	}
	settled(t, js)
	for i, rc := range all {
		if got := len(rc.bodies()); got != 1 {
			t.Errorf("receiver %d got %d POSTs, want 1", i, got)
		}
	}
}

// An announcement's notification carries approve and deny links signed
// for each receiver (by notify:<host>) and, with a timeout, expires_at;
// a Slack receiver's message has them too. The approve link, confirmed on
// the inbox, decides the call as the receiver, and the resolution is
// notified by it.
func TestNotifications(t *testing.T) {
	b := servetest.Setup(t)
	b.Approval = &session.ApprovalPolicy{Timeout: time.Hour}
	hook, slack := newReceiver(t), newReceiver(t)
	slackRecv, err := notify.ParseReceiver("slack:" + slack.srv.URL + "/services/T/B/secret")
	if err != nil {
		t.Fatal(err)
	}
	r := b.Replica(t, "r1")
	startNotifier(t, b, r, nil, notify.Receiver{URL: hook.srv.URL + "/hook"}, slackRecv)
	before := time.Now()
	f := r.Start(t, "deploy prod")
	task := servetest.Paused(t, f)
	var n notify.Notification
	if err := json.Unmarshal([]byte(offloadtest.WaitOrTimeout(t, hook.posts, "approval_requested")), &n); err != nil {
		t.Fatal(err)
	}
	if n.Event != notify.EventApprovalRequested || n.ConversationID != f.ConversationID || n.TaskID != task || n.Tool != "deploy" || n.Agent != "ops" ||
		string(n.Args) != `{"target":"prod"}` || n.Links.Inbox != "https://agents.example.com/" ||
		!strings.HasPrefix(n.Links.Approve, "https://agents.example.com/links/") || !strings.HasPrefix(n.Links.Deny, "https://agents.example.com/links/") {
		t.Fatalf("notification %+v", n)
	}
	if n.ExpiresAt == nil || n.ExpiresAt.Before(before.Add(time.Hour-time.Second)) || n.ExpiresAt.After(time.Now().Add(time.Hour)) {
		t.Errorf("expires_at %v, want the announcement's time + 1h", n.ExpiresAt)
	}
	var sm map[string]string
	if err := json.Unmarshal([]byte(offloadtest.WaitOrTimeout(t, slack.posts, "the Slack message")), &sm); err != nil ||
		!strings.Contains(sm["text"], "|Approve>") || !strings.Contains(sm["text"], "|Deny>") {
		t.Fatalf("Slack message %v, %v", sm, err)
	}
	// The link, on the service's inbox.
	ctx := context.Background()
	srv, face := r.Face(t, "approver-token-0123456789 approver ann\n", agentproc.FaceOptions{})
	hookHost := strings.TrimPrefix(hook.srv.URL, "http://")
	key, err := face.Links.Key(ctx)
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := protocol.ArgsDigest(n.Args)
	for action, l := range map[string]string{"approve": n.Links.Approve, "deny": n.Links.Deny} {
		c, err := links.Verify(key, strings.TrimPrefix(l, "https://agents.example.com/links/"), time.Now())
		if err != nil || c.Conversation != f.ConversationID || c.Task != task || c.Digest != digest || c.Action != action ||
			c.To != "notify:"+hookHost || c.Expires != n.ExpiresAt.Unix() {
			t.Errorf("the %s link's claims %+v (%v): want the call, its digest, the action, the receiver and expires_at", action, c, err)
		}
	}
	approve := strings.Replace(n.Links.Approve, "https://agents.example.com", srv.URL, 1)
	if code, page := post(t, approve); code != http.StatusOK || !strings.Contains(page, "Approved as notify:"+hookHost) {
		t.Fatalf("the notified link: %d\n%s", code, page)
	}
	servetest.Finished(t, r, f.ConversationID, "done deployed prod")
	n = notify.Notification{}
	if err := json.Unmarshal([]byte(offloadtest.WaitOrTimeout(t, hook.posts, "approval_resolved")), &n); err != nil {
		t.Fatal(err)
	}
	if n.Event != notify.EventApprovalResolved || n.TaskID != task || n.Resolved != "approved" || n.By != "notify:"+hookHost || n.Tool != "deploy" ||
		n.Links.Approve != "" {
		t.Errorf("resolution %+v", n)
	}
}

// A replica stopping while it sends a notification hands it over: its
// notifier naks the message and another replica's sends it, so that a
// replica going away loses no notification.
func TestNotifyHandOver(t *testing.T) {
	b := servetest.Setup(t)
	arrived := make(chan struct{}, 4)
	var mu sync.Mutex
	var got []string
	hung := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		first := !hung
		hung = true
		got = append(got, string(body))
		mu.Unlock()
		arrived <- struct{}{}
		if first {
			<-r.Context().Done() // hangs until the notifier gives up: its replica stops
		}
	}))
	t.Cleanup(srv.Close)
	recv := notify.Receiver{URL: srv.URL}
	first := startNotifier(t, b, nil, nil, recv)
	js := b.Srv.JetStream(t)
	task := announce(t, js, false)
	offloadtest.WaitOrTimeout(t, arrived, "the first replica's attempt")
	_ = first.Stop()
	startNotifier(t, b, nil, nil, recv)
	offloadtest.WaitOrTimeout(t, arrived, "the other replica's attempt")
	settled(t, js)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || !strings.Contains(got[1], task) {
		t.Errorf("POSTs %q, want the announcement from each replica", got)
	}
}

// post POSTs an empty form to u, as a browser confirming a link does,
// and returns the answer's status and body.
func post(t *testing.T, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, u, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
