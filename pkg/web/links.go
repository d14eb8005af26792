package web

import (
	"cmp"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/links"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The signed links' pages (SPEC §12): an approver makes a pair for a
// recipient from the inbox; opening one shows a confirmation page, and
// only confirming (a POST) publishes the decision, by the recipient's
// label, once.

// maxLinkTTL bounds how long a link lives.
const maxLinkTTL = 7 * 24 * time.Hour

// mintLinks makes the approve and deny links of a call for a recipient,
// under the public URL (never the request's Host: a forged one would
// hand out links to another site).
func (h *handler) mintLinks(w http.ResponseWriter, r *http.Request) error {
	conv, task := r.PathValue("id"), r.PathValue("task")
	to := strings.TrimSpace(r.PostForm.Get("to"))
	ttl, err := time.ParseDuration(cmp.Or(r.PostForm.Get("ttl"), "24h"))
	if to == "" || err != nil || ttl <= 0 || ttl > maxLinkTTL {
		return badRequest("A link needs a recipient and a lifetime up to 168h (e.g. 2h).")
	}
	c, err := h.Desk.Call(r.Context(), conv, task)
	if errors.Is(err, pending.ErrNotPending) {
		return errorf(http.StatusConflict, "not_pending", "This call is no longer pending.")
	}
	if err != nil {
		return err
	}
	digest := r.PostForm.Get("args_digest")
	if want, _ := protocol.ArgsDigest(c.Args); digest != want {
		return errorf(http.StatusConflict, "stale", "The call's arguments changed since the page was shown: no link was made. Look again.")
	}
	key, err := h.Links.Key(r.Context())
	if err != nil {
		return err
	}
	exp := h.Now().Add(ttl)
	link := func(action string) string {
		return strings.TrimSuffix(h.PublicURL, "/") + "/links/" + links.Sign(key, links.Claims{ID: protocol.NewID(), Conversation: conv, Task: task, Digest: digest,
			Action: action, Expires: exp.Unix(), To: to})
	}
	h.render(w, r, http.StatusOK, "links", map[string]any{"Tool": c.Tool, "Task": task, "To": to, "Expires": exp,
		"Approve": link("approve"), "Deny": link("deny")})
	return nil
}

// linkPage shows a link's confirmation page; it publishes nothing.
func (h *handler) linkPage(w http.ResponseWriter, r *http.Request) error {
	c, pc, err := h.linkedCall(r)
	if err != nil {
		return err
	}
	if pc == nil {
		return errorf(http.StatusConflict, "not_pending", "This call is no longer pending.")
	}
	h.render(w, r, http.StatusOK, "confirm", map[string]any{"Claims": c, "Tool": pc.Tool, "Args": pretty(pc.Args),
		"Expires": time.Unix(c.Expires, 0), "Token": r.PathValue("token")})
	return nil
}

// useLink publishes a link's decision, once: by its recipient, bound to
// the arguments it was made for (a link for arguments that changed is
// refused, and stays unused).
func (h *handler) useLink(w http.ResponseWriter, r *http.Request) error {
	c, pc, err := h.linkedCall(r)
	if err != nil {
		return err
	}
	if pc != nil {
		if want, _ := protocol.ArgsDigest(pc.Args); want != c.Digest {
			return errorf(http.StatusConflict, "stale", "The call's arguments changed since this link was made: it is refused, nothing was published.")
		}
	}
	if err := h.Links.Use(r.Context(), c.ID); errors.Is(err, links.ErrUsed) {
		return errorf(http.StatusConflict, "used", "This link was used already.")
	} else if err != nil {
		return err
	}
	d := protocol.Decision{Approved: c.Action == "approve", By: c.To, ArgsDigest: c.Digest, Channel: protocol.ChannelLink}
	if !d.Approved {
		d.Message = strings.TrimSpace(r.PostForm.Get("reason"))
	}
	if _, err := h.Desk.Decide(r.Context(), c.Conversation, c.Task, d); err != nil {
		h.Logger.Info("link: decision refused", slog.String("task_id", c.Task), slog.Any("error", err))
		return errorf(http.StatusConflict, "refused", "Not published: %s", err.Error())
	}
	word := "Denied"
	if d.Approved {
		word = "Approved"
	}
	h.message(w, r, http.StatusOK, word, word+" as "+c.To+".")
	return nil
}

// linkedCall returns the claims of the request's link and its call as
// pending now (nil when no longer pending): an error for a link not of
// this service (404) or expired (410).
func (h *handler) linkedCall(r *http.Request) (links.Claims, *pending.Call, error) {
	key, err := h.Links.Key(r.Context())
	if err != nil {
		return links.Claims{}, nil, err
	}
	c, err := links.Verify(key, r.PathValue("token"), h.Now())
	switch {
	case errors.Is(err, links.ErrExpired):
		return c, nil, errorf(http.StatusGone, "expired", "This link has expired.")
	case err != nil:
		return c, nil, errorf(http.StatusNotFound, "not_found", "This link is not one of this service's.")
	}
	pc, err := h.Desk.Call(r.Context(), c.Conversation, c.Task)
	if errors.Is(err, pending.ErrNotPending) {
		return c, nil, nil
	}
	return c, pc, err
}
