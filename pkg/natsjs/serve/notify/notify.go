// Package notify is the notifier of `agent serve --notify` (SPEC §12): a
// POST of a JSON notification (or a Slack message), with signed approve
// and deny links, to every receiver for each approval announced and each
// resolved, from a durable consumer on the approvals stream shared by
// every replica, so that each is sent by one replica, once.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/links"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/internal/startstop"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Config configures a [Notifier].
type Config struct {
	// JetStream reaches the approvals stream. Required.
	JetStream jetstream.JetStream
	// Provision are the options the notification consumer is ensured with
	// (its Prefix the subjects' prefix).
	Provision natsjs.ProvisionOptions
	// Receivers are where the notifications go (see [ParseReceiver]); at
	// least one.
	Receivers []Receiver
	// PublicURL is the service's base URL as people reach it (for
	// example https://agents.example.com): the notifications' links start
	// with it. Required.
	PublicURL string
	// Store, if set, names each notification's agent (the conversation's
	// recorded agent).
	Store conversation.Store
	// Links, if set, signs each announcement's approve and deny links
	// (SPEC §12, convstore.Links): single-use, bound to the conversation,
	// the task, the call's args_digest, the action and the expiry, and
	// made for each receiver's recipient, "notify:<host of its URL>" (the
	// decision's by). Without it the notifications carry the inbox's link
	// only.
	Links links.Store
	// Expiry, if set, is the timeout of an approval of agent's tool
	// (serve.Service.ApprovalTimeout): the notification's expires_at is
	// its announcement's time plus it, and its links expire then.
	Expiry func(ctx context.Context, agent, tool string) (pending.Timeout, bool)
	// LinkTTL is how long the links of an approval without a timeout
	// last from its announcement. Defaults to 24 h.
	LinkTTL time.Duration
	// Client sends the notifications. Defaults to a client with a 10 s
	// timeout.
	Client *http.Client
	// Attempts bounds the attempts at each receiver of one notification
	// (the first included). Defaults to 5.
	Attempts int
	// Backoff is the wait before the first retry, doubled before each next
	// one. Defaults to 1 s.
	Backoff time.Duration
	// Concurrency bounds the notifications sent at once by this replica.
	// Defaults to 8.
	Concurrency int
	// Logger receives the failures. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics, if set, counts the attempts (offload_notifications_total).
	Metrics *metrics.Notify
}

// Notifier sends a notification to every receiver for each approval
// announced and each resolved (SPEC §12, `agent serve --notify`). Its
// messages come from a durable consumer on the approvals stream shared by
// every replica, acked once every receiver answered 2xx or its attempts
// ran out, so that each announcement and resolution is sent by one
// replica, once (again only when a replica stops or dies before its ack).
// [Notifier.Start] starts it, [Notifier.Stop] stops it.
type Notifier struct {
	cfg  Config
	log  *slog.Logger
	subj protocol.Subjects

	ctx    context.Context // cancelled by Stop: retries stop
	cancel context.CancelFunc
	slots  chan struct{}

	life    startstop.Base
	consume jetstream.ConsumeContext // set by Start
	stream  jetstream.Stream         // set by Start
	wg      sync.WaitGroup
}

// New returns a Notifier over cfg; [Notifier.Start] starts it.
func New(cfg Config) (*Notifier, error) {
	if cfg.JetStream == nil || len(cfg.Receivers) == 0 || cfg.PublicURL == "" {
		return nil, fmt.Errorf("%w: notify: a notifier needs JetStream, receivers and the public URL", natsjs.ErrInvalidConfig)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 5
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.LinkTTL <= 0 {
		cfg.LinkTTL = 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Notifier{cfg: cfg, log: cfg.Logger, subj: protocol.Subjects{Prefix: cfg.Provision.Prefix},
		ctx: ctx, cancel: cancel, slots: make(chan struct{}, cfg.Concurrency)}, nil
}

// Start ensures the notification consumer and starts consuming it. A
// Notifier starts once.
func (n *Notifier) Start(ctx context.Context) error {
	if err := n.life.StartInit(); err != nil {
		return natsjs.ErrStarted
	}
	if err := n.start(ctx); err != nil {
		n.cancel()
		n.life.StartFailed()
		return err
	}
	return nil
}

func (n *Notifier) start(ctx context.Context) error {
	c, err := natsjs.EnsureNotifyConsumer(ctx, n.cfg.JetStream, n.cfg.Provision)
	if err != nil {
		return err
	}
	stream, err := n.cfg.JetStream.Stream(ctx, natsjs.NamesFor(n.cfg.Provision.Prefix).Approvals)
	if err != nil {
		return fmt.Errorf("notify: the approvals stream: %w", err)
	}
	n.stream = stream
	cc, err := c.Consume(n.onMessage, jetstream.PullMaxMessages(2*n.cfg.Concurrency))
	if err != nil {
		return fmt.Errorf("notify: consume the approvals: %w", err)
	}
	n.consume = cc
	return nil
}

// Stop stops consuming, stops the retries under way (their messages go
// to another replica) and waits for the notifications being sent. It is
// idempotent.
func (n *Notifier) Stop() error {
	return n.life.Stop(func() error {
		n.consume.Stop()
		<-n.consume.Closed()
		n.cancel()
		n.wg.Wait()
		return nil
	})
}

// Stopped is closed once the notifier has stopped.
func (n *Notifier) Stopped() <-chan struct{} { return n.life.Done() }

// onMessage handles one message of the approvals stream on a goroutine of
// its own, once a slot of Concurrency is free.
func (n *Notifier) onMessage(m jetstream.Msg) {
	select {
	case n.slots <- struct{}{}:
	case <-n.ctx.Done():
		_ = m.Nak()
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { <-n.slots }()
		note, claims, err := n.notification(n.ctx, m)
		if errors.Is(err, errAnnouncedBefore) {
			_ = m.Ack()
			return
		}
		if err != nil {
			n.log.Warn("notify: not an approval's announcement or resolution; skipped", slog.String("subject", m.Subject()), slog.Any("error", err))
			_ = m.Term()
			return
		}
		if !n.send(n.ctx, m, note, claims) {
			_ = m.Nak() // stopped: another replica sends it
			return
		}
		_ = m.Ack()
	}()
}

// notification builds the notification of message m: an announcement
// (with what its links are signed for), or a resolution completed from
// its announcement (the first message of its subject).
func (n *Notifier) notification(ctx context.Context, m jetstream.Msg) (Notification, *links.Claims, error) {
	kind, conv, task, _, err := n.subj.Parse(m.Subject())
	if err != nil || kind != protocol.KindApproval {
		return Notification{}, nil, fmt.Errorf("not an approval's subject: %w", err)
	}
	note := Notification{Event: EventApprovalRequested, ConversationID: conv, TaskID: task}
	var claims *links.Claims // an announcement's
	var r protocol.Resolution
	if json.Unmarshal(m.Data(), &r) == nil && r.Resolved != "" {
		note.Event, note.Resolved, note.By = EventApprovalResolved, r.Resolved, r.By
		first, err := n.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(m.Subject()))
		if err == nil {
			if ap, err := protocol.DecodeApproval(first.Data, nil); err == nil {
				note.Tool, note.Args = ap.Tool, ap.Args
			}
		}
	} else {
		ap, err := protocol.DecodeApproval(m.Data(), nil)
		if err != nil {
			return Notification{}, nil, err
		}
		if n.announcedBefore(ctx, m) {
			return Notification{}, nil, errAnnouncedBefore
		}
		note.Tool, note.Args = ap.Tool, ap.Args
		digest := ap.ArgsDigest
		if digest == "" {
			digest, _ = protocol.ArgsDigest(ap.Args)
		}
		claims = &links.Claims{Conversation: conv, Task: task, Digest: digest}
	}
	if n.cfg.Store != nil {
		if st, _, err := n.cfg.Store.Load(ctx, conv); err == nil && st.Agent != nil {
			note.Agent = st.Agent.Name
		}
	}
	note.Links.Inbox = inboxURL(n.cfg.PublicURL)
	if claims != nil {
		at := time.Now()
		if meta, err := m.Metadata(); err == nil {
			at = meta.Timestamp // the announcement's: a redelivery's expiry is the same
		}
		expires := at.Add(n.cfg.LinkTTL)
		if n.cfg.Expiry != nil {
			if to, ok := n.cfg.Expiry(ctx, note.Agent, note.Tool); ok {
				e := at.Add(to.After).UTC()
				note.ExpiresAt, expires = &e, e
			}
		}
		claims.Expires = expires.Unix()
	}
	return note, claims, nil
}

// errAnnouncedBefore says an announcement repeats one stored before on
// its subject: its notification was sent then.
var errAnnouncedBefore = errors.New("announced before")

// announcedBefore reports whether the announcement m repeats one stored
// before it on its subject: a session that continues a conversation
// announces the calls still pending again (the same task), which the
// stream's duplicate window (2 min) does not always absorb.
func (n *Notifier) announcedBefore(ctx context.Context, m jetstream.Msg) bool {
	meta, err := m.Metadata()
	if err != nil {
		return false
	}
	first, err := n.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(m.Subject()))
	return err == nil && first.Sequence < meta.Sequence.Stream
}

// send sends note to every receiver, each up to Attempts times with a
// doubling backoff (the message kept in progress before each attempt, so
// that the ack wait bounds one attempt and one backoff, not them all); a receiver
// whose attempts ran out is counted and logged. An announcement's note
// gets, for each receiver, approve and deny links signed for it from
// claims (with Config.Links). It returns false when the notifier stopped
// before it was done.
func (n *Notifier) send(ctx context.Context, m jetstream.Msg, note Notification, claims *links.Claims) bool {
	var key []byte
	if claims != nil && n.cfg.Links != nil {
		k, err := n.cfg.Links.Key(ctx)
		if err != nil {
			n.log.Warn("notify: the links' key; sent without approve/deny links", slog.String("task_id", note.TaskID), slog.Any("error", err))
		}
		key = k
	}
	for _, rc := range n.cfg.Receivers {
		if key != nil {
			note.Links.Approve, note.Links.Deny = n.link(key, *claims, "approve", rc), n.link(key, *claims, "deny", rc)
		}
		body, err := rc.body(note)
		if err != nil {
			n.log.Error("notify: encode", slog.Any("error", err))
			continue
		}
		delay := n.cfg.Backoff
		for attempt := 1; ; attempt++ {
			_ = m.InProgress() // each attempt (≤ the client's timeout) within the ack wait
			err := n.post(ctx, rc.URL, body)
			if err == nil {
				n.cfg.Metrics.Count(rc.kind(), metrics.NotifySent)
				break
			}
			if ctx.Err() != nil {
				return false
			}
			if attempt >= n.cfg.Attempts {
				n.cfg.Metrics.Count(rc.kind(), metrics.NotifyFailed)
				n.log.Error("notify: receiver failed; given up", slog.String("receiver", rc.kind()), slog.String("event", note.Event),
					slog.String("conversation_id", note.ConversationID), slog.String("task_id", note.TaskID), slog.Int("attempts", attempt), slog.Any("error", err))
				break
			}
			n.cfg.Metrics.Count(rc.kind(), metrics.NotifyRetried)
			n.log.Warn("notify: receiver failed; retried", slog.String("receiver", rc.kind()), slog.Int("attempt", attempt), slog.Duration("in", delay), slog.Any("error", err))
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false
			}
			delay *= 2
		}
	}
	return true
}

// link is the signed link of action on the call of c for receiver rc:
// the inbox's /links/<token> under the public URL.
func (n *Notifier) link(key []byte, c links.Claims, action string, rc Receiver) string {
	c.ID, c.Action, c.To = protocol.NewID(), action, rc.Recipient()
	return strings.TrimRight(n.cfg.PublicURL, "/") + "/links/" + links.Sign(key, c)
}

// post POSTs body to url; an answer other than 2xx is an error.
func (n *Notifier) post(ctx context.Context, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "offload-agent-serve")
	resp, err := n.cfg.Client.Do(req)
	if ue := (*neturl.Error)(nil); errors.As(err, &ue) {
		return ue.Err // without the URL: a Slack webhook's is a secret
	}
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
