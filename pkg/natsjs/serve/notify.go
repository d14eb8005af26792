package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// Notifications (SPEC §12, --notify): for each approval a run of this
// replica announces, and each resolution it publishes, a POST of a
// [Notification] to every URL of Config.Notify (a "slack:" URL gets a
// Slack incoming-webhook message instead), with signed approve/deny links
// when Config.Links is set. Sent on the service's goroutines, each
// attempted three times within notifyTimeout; a notification that cannot
// be sent is logged and dropped (the inbox still shows the call).

// notifyTimeout bounds one notification's attempts.
const notifyTimeout = 10 * time.Second

// Notification is the JSON a --notify URL receives.
type Notification struct {
	// Event is "approval_requested" or "approval_resolved".
	Event          string          `json:"event"`
	ConversationID string          `json:"conversation_id"`
	TaskID         string          `json:"task_id"`
	Tool           string          `json:"tool,omitempty"`
	Args           json.RawMessage `json:"args,omitempty"`
	Agent          string          `json:"agent,omitempty"`
	// ExpiresAt is when the approval's timeout decides; nil without one.
	ExpiresAt *time.Time `json:"expires_at"`
	// Resolved and By, of a resolution: approved, denied or cancelled, by
	// whom.
	Resolved string `json:"resolved,omitempty"`
	By       string `json:"by,omitempty"`
	// Links are the signed approve and deny links (a request's) and the
	// inbox's.
	Links map[string]string `json:"links"`
}

// announced reads an open announcement (convstore.Announcer.Announced).
type announced interface {
	Announced(ctx context.Context, conv, task string) (protocol.Approval, bool)
}

// notifyingAnnouncer is the sessions' announcer of a service with
// Config.Notify.
type notifyingAnnouncer struct {
	session.Announcer
	svc *Service
}

// Announce implements session.Announcer.
func (n notifyingAnnouncer) Announce(ctx context.Context, rec *deferred.PendingRecord) error {
	if err := n.Announcer.Announce(ctx, rec); err != nil || rec == nil {
		return err
	}
	agentName := ""
	if r := n.svc.live(rec.ConversationID); r != nil {
		agentName = r.agent
	}
	for _, t := range rec.Tasks {
		if t.Kind != deferred.KindApproval {
			continue
		}
		note := Notification{Event: "approval_requested", ConversationID: rec.ConversationID, TaskID: t.TaskID, Tool: t.Tool,
			Args: t.Args, Agent: agentName, Links: map[string]string{"inbox": n.svc.cfg.PublicURL + "/"}}
		if p := n.svc.policy(ctx, agentName, t.Tool); p != nil && (n.svc.cfg.Expirer != nil || n.svc.cfg.Timers != nil) {
			at := time.Now().Add(p.Timeout).UTC()
			note.ExpiresAt = &at
		}
		var sign func(to string) map[string]string
		if l := n.svc.cfg.Links; l != nil {
			if key, err := l.Key(ctx); err == nil {
				digest, _ := protocol.ArgsDigest(t.Args)
				exp := time.Now().Add(24 * time.Hour)
				if note.ExpiresAt != nil {
					exp = *note.ExpiresAt
				}
				sign = func(to string) map[string]string {
					links := map[string]string{}
					for _, action := range []string{"approve", "deny"} {
						links[action] = n.svc.cfg.PublicURL + "/links/" + SignLink(key, LinkClaims{ID: protocol.NewID(),
							Conversation: rec.ConversationID, Task: t.TaskID, Digest: digest, Action: action, Expires: exp.Unix(), To: to})
					}
					return links
				}
			}
		}
		n.svc.notify(note, sign)
	}
	return nil
}

// Resolve implements session.Announcer.
func (n notifyingAnnouncer) Resolve(ctx context.Context, conv string, r protocol.Resolution) error {
	note := Notification{Event: "approval_resolved", ConversationID: conv, TaskID: r.TaskID, Resolved: r.Resolved, By: r.By,
		Links: map[string]string{"inbox": n.svc.cfg.PublicURL + "/"}}
	if a, ok := n.Announcer.(announced); ok {
		if ap, ok := a.Announced(ctx, conv, r.TaskID); ok {
			note.Tool, note.Args = ap.Tool, ap.Args
		}
	}
	if run := n.svc.live(conv); run != nil {
		note.Agent = run.agent
	}
	if err := n.Announcer.Resolve(ctx, conv, r); err != nil {
		return err
	}
	n.svc.notify(note, nil)
	return nil
}

// notify sends note to every --notify URL on the service's goroutines,
// with the approve/deny links sign makes for the URL's recipient
// ("notify:<host>", the decision's by), when sign is set.
func (s *Service) notify(note Notification, sign func(to string) map[string]string) {
	for _, u := range s.cfg.Notify {
		if !s.enter() {
			return
		}
		note := note
		note.Links = map[string]string{"inbox": note.Links["inbox"]}
		if sign != nil {
			maps.Copy(note.Links, sign("notify:"+hostOf(strings.TrimPrefix(u, "slack:"))))
		}
		go func() {
			defer s.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
			defer cancel()
			if err := s.send(ctx, u, note); err != nil {
				s.log.Warn("notification not sent", slog.String("event", note.Event), slog.String("task_id", note.TaskID), slog.Any("error", err))
			}
		}()
	}
}

// send POSTs note to u, up to three times.
func (s *Service) send(ctx context.Context, u string, note Notification) error {
	body, err := json.Marshal(note)
	if err != nil {
		return err
	}
	if hook, ok := strings.CutPrefix(u, "slack:"); ok {
		u = hook
		body, _ = json.Marshal(map[string]string{"text": slackText(note)})
	}
	var last error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return nil
		}
		last = fmt.Errorf("POST %s: %s", redactURL(u), resp.Status)
	}
	return last
}

// slackText is note as a Slack message (mrkdwn links).
func slackText(n Notification) string {
	var b strings.Builder
	if n.Event == "approval_requested" {
		fmt.Fprintf(&b, "*%s* waits for approval (agent %s, task %s): `%s`", n.Tool, n.Agent, n.TaskID, n.Args)
		if n.ExpiresAt != nil {
			fmt.Fprintf(&b, "; expires %s", n.ExpiresAt.Format(time.RFC3339))
		}
		for _, k := range []string{"approve", "deny"} {
			if l, ok := n.Links[k]; ok {
				fmt.Fprintf(&b, " · <%s|%s>", l, k)
			}
		}
	} else {
		fmt.Fprintf(&b, "*%s* (task %s) %s", n.Tool, n.TaskID, n.Resolved)
		if n.By != "" {
			fmt.Fprintf(&b, " by %s", n.By)
		}
	}
	fmt.Fprintf(&b, " · <%s|inbox>", n.Links["inbox"])
	return b.String()
}

// hostOf is the host of URL u ("" when it has none).
func hostOf(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return ""
}

// redactURL is u without its path and query (a webhook's secret).
func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.IndexByte(u[i+3:], '/'); j >= 0 {
			return u[:i+3+j] + "/…"
		}
	}
	return u
}
