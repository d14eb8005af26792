package notify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// The events of a [Notification].
const (
	EventApprovalRequested = "approval_requested"
	EventApprovalResolved  = "approval_resolved"
)

// Notification is what `agent serve --notify URL` POSTs for each approval
// announced or resolved (SPEC §12).
type Notification struct {
	// Event is EventApprovalRequested or EventApprovalResolved.
	Event string `json:"event"`
	// ConversationID and TaskID name the call.
	ConversationID string `json:"conversation_id"`
	TaskID         string `json:"task_id"`
	// Tool and Args are the call's, as announced.
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	// Agent is the conversation's agent ("" when it has none recorded).
	Agent string `json:"agent"`
	// ExpiresAt is when the call's approval expires (its timeout, SPEC
	// §12): null without one.
	ExpiresAt *time.Time `json:"expires_at"`
	// Links are where a person acts on the call.
	Links NotificationLinks `json:"links"`
	// Resolved, for EventApprovalResolved, is approved, denied or
	// cancelled (protocol.ResolvedXxx).
	Resolved string `json:"resolved,omitempty"`
	// By, for EventApprovalResolved, names who decided, as the decision
	// claimed it.
	By string `json:"by,omitempty"`
}

// NotificationLinks are a [Notification]'s links.
type NotificationLinks struct {
	// Approve and Deny, of an announcement, are the signed single-use
	// links of SPEC §12 made for the receiver (left out without
	// NotifyConfig.Links): opening one shows a confirmation page.
	Approve string `json:"approve,omitempty"`
	Deny    string `json:"deny,omitempty"`
	// Inbox is the web inbox of the service (its public URL's /).
	Inbox string `json:"inbox"`
}

// Receiver is where a [Notifier] sends its notifications.
type Receiver struct {
	// URL receives a POST per notification.
	URL string
	// Slack says the URL is a Slack incoming webhook: the POST is a Slack
	// message ({"text"}) rather than the Notification's JSON.
	Slack bool
}

// ParseReceiver parses a value of --notify: an http(s) URL, or
// slack:URL for a Slack incoming webhook.
func ParseReceiver(s string) (Receiver, error) {
	var r Receiver
	r.URL, r.Slack = strings.CutPrefix(s, "slack:")
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Receiver{}, errors.New("want an http(s) URL or slack:URL")
	}
	return r, nil
}

// ParseReceivers parses each of values (ParseReceiver); an error names
// the value refused.
func ParseReceivers(values []string) ([]Receiver, error) {
	out := make([]Receiver, 0, len(values))
	for _, v := range values {
		r, err := ParseReceiver(v)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", v, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Recipient is the receiver's label as the decisions of its links name
// it (their by): "notify:" and the host of its URL.
func (r Receiver) Recipient() string {
	host := ""
	if u, err := url.Parse(r.URL); err == nil {
		host = u.Host
	}
	return "notify:" + host
}

// kind is the receiver's label in offload_notifications_total (never
// its URL: a Slack webhook's is a secret).
func (r Receiver) kind() string {
	if r.Slack {
		return "slack"
	}
	return "webhook"
}

// body is what r is sent for note.
func (r Receiver) body(note Notification) ([]byte, error) {
	if r.Slack {
		return json.Marshal(map[string]string{"text": slackText(note)})
	}
	return json.Marshal(note)
}

// slackText is note as a Slack message's text (mrkdwn): what waits or how
// it was resolved, the arguments, and the links.
func slackText(note Notification) string {
	var b strings.Builder
	switch note.Event {
	case EventApprovalRequested:
		fmt.Fprintf(&b, "Approval requested: *%s*", slackEscape(note.Tool))
	default:
		fmt.Fprintf(&b, "Approval %s: *%s*", slackEscape(note.Resolved), slackEscape(note.Tool))
		if note.By != "" {
			fmt.Fprintf(&b, " by %s", slackEscape(note.By))
		}
	}
	if note.Agent != "" {
		fmt.Fprintf(&b, " (agent %s)", slackEscape(note.Agent))
	}
	fmt.Fprintf(&b, "\nconversation %s, task %s", note.ConversationID, note.TaskID)
	if len(note.Args) > 0 {
		fmt.Fprintf(&b, "\n```%s```", slackEscape(plainJSON(note.Args)))
	}
	var links []string
	for _, l := range []struct{ url, label string }{{note.Links.Approve, "Approve"}, {note.Links.Deny, "Deny"}, {note.Links.Inbox, "Open the inbox"}} {
		if l.url != "" {
			links = append(links, "<"+l.url+"|"+l.label+">")
		}
	}
	if len(links) > 0 {
		b.WriteString("\n" + strings.Join(links, " · "))
	}
	return b.String()
}

// slackEscape escapes the characters Slack's mrkdwn gives a meaning to
// (&, <, >).
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// plainJSON is raw as compact JSON text without the escapes of HTML's
// characters (\u003c for <): Slack shows the text as it is.
func plainJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// inboxURL is the web inbox's URL under the public base URL.
func inboxURL(public string) string {
	return strings.TrimRight(public, "/") + "/"
}
