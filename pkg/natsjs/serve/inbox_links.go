package serve

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The signed links' pages (SPEC §12): an approver makes a pair for a
// recipient from the inbox; opening one shows a confirmation page, and
// only confirming (a POST) publishes the decision, by the recipient's
// label, once.

// maxLinkTTL bounds how long a link lives.
const maxLinkTTL = 7 * 24 * time.Hour

// mintLinks makes the approve and deny links of a call for a recipient.
func (in *inbox) mintLinks(w http.ResponseWriter, r *http.Request) {
	conv, task := r.PathValue("id"), r.PathValue("task")
	s := sessionOf(r)
	if !s.may(RoleApprover) {
		in.fail(w, r, http.StatusForbidden, "Role "+string(s.Role)+" may not decide approvals, nor make links that do.")
		return
	}
	to := strings.TrimSpace(r.PostFormValue("to"))
	ttl, err := time.ParseDuration(cmpOr(r.PostFormValue("ttl"), "24h"))
	if to == "" || err != nil || ttl <= 0 || ttl > maxLinkTTL {
		in.fail(w, r, http.StatusBadRequest, "A link needs a recipient and a lifetime up to 168h (e.g. 2h).")
		return
	}
	_, pt, err := in.h.pendingCall(r.Context(), conv, task)
	if err != nil {
		in.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	digest := r.PostFormValue("args_digest")
	if pt == nil {
		in.fail(w, r, http.StatusConflict, "This call is no longer pending.")
		return
	}
	if want, _ := protocol.ArgsDigest(pt.Args); digest != want {
		in.fail(w, r, http.StatusConflict, "The call's arguments changed since the page was shown: no link was made. Look again.")
		return
	}
	key, err := in.h.Links.Key(r.Context())
	if err != nil {
		in.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	exp := in.now().Add(ttl)
	link := func(action string) string {
		return origin(r) + "/links/" + SignLink(key, LinkClaims{ID: protocol.NewID(), Conversation: conv, Task: task, Digest: digest,
			Action: action, Expires: exp.Unix(), To: to})
	}
	in.render(w, r, http.StatusOK, "links", map[string]any{"Tool": pt.Tool, "Task": task, "To": to, "Expires": exp,
		"Approve": link("approve"), "Deny": link("deny")})
}

// link shows a link's confirmation page; it publishes nothing.
func (in *inbox) link(w http.ResponseWriter, r *http.Request) {
	c, pt, ok := in.linkedCall(w, r)
	if !ok {
		return
	}
	if pt == nil {
		in.fail(w, r, http.StatusConflict, "This call is no longer pending.")
		return
	}
	in.render(w, r, http.StatusOK, "confirm", map[string]any{"Claims": c, "Tool": pt.Tool, "Args": pretty(pt.Args),
		"Expires": time.Unix(c.Expires, 0), "Token": r.PathValue("token")})
}

// useLink publishes a link's decision, once: by its recipient, bound to
// the arguments it was made for (a link for arguments that changed is
// refused, and stays unused).
func (in *inbox) useLink(w http.ResponseWriter, r *http.Request) {
	c, pt, ok := in.linkedCall(w, r)
	if !ok {
		return
	}
	if pt != nil {
		if want, _ := protocol.ArgsDigest(pt.Args); want != c.Digest {
			in.fail(w, r, http.StatusConflict, "The call's arguments changed since this link was made: it is refused, nothing was published.")
			return
		}
	}
	if err := in.h.Links.Use(r.Context(), c.ID); errors.Is(err, convstore.ErrLinkUsed) {
		in.fail(w, r, http.StatusConflict, "This link was used already.")
		return
	} else if err != nil {
		in.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	d := protocol.Decision{Approved: c.Action == "approve", By: c.To, ArgsDigest: c.Digest, Channel: protocol.ChannelLink}
	if !d.Approved {
		d.Message = strings.TrimSpace(r.PostFormValue("reason"))
	}
	if err := in.h.Publisher.Decide(r.Context(), c.Conversation, c.Task, d); err != nil {
		in.h.Logger.Info("link: decision refused", slog.String("task_id", c.Task), slog.Any("error", err))
		in.fail(w, r, http.StatusConflict, "Not published: "+err.Error())
		return
	}
	word := "Denied"
	if d.Approved {
		word = "Approved"
	}
	in.render(w, r, http.StatusOK, "message", map[string]any{"Title": word, "Message": word + " as " + c.To + "."})
}

// linkedCall returns the claims of the request's link and its call as
// pending now (nil when no longer pending), or answers the request.
func (in *inbox) linkedCall(w http.ResponseWriter, r *http.Request) (LinkClaims, *deferred.PendingTask, bool) {
	c, ok := in.verifiedLink(w, r)
	if !ok {
		return c, nil, false
	}
	_, pt, err := in.h.pendingCall(r.Context(), c.Conversation, c.Task)
	if err != nil {
		in.fail(w, r, http.StatusInternalServerError, err.Error())
		return c, nil, false
	}
	return c, pt, true
}

// verifiedLink returns the claims of the request's link, or answers the
// request (404 for a link not of this service, 410 for an expired one).
func (in *inbox) verifiedLink(w http.ResponseWriter, r *http.Request) (LinkClaims, bool) {
	key, err := in.h.Links.Key(r.Context())
	if err != nil {
		in.fail(w, r, http.StatusInternalServerError, err.Error())
		return LinkClaims{}, false
	}
	c, err := VerifyLink(key, r.PathValue("token"), in.now())
	switch {
	case errors.Is(err, ErrLinkExpired):
		in.fail(w, r, http.StatusGone, "This link has expired.")
		return LinkClaims{}, false
	case err != nil:
		in.fail(w, r, http.StatusNotFound, "This link is not one of this service's.")
		return LinkClaims{}, false
	}
	return c, true
}

// cmpOr is s, or def when s is empty.
func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
