package web

import (
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/pending"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/sse"
)

// The web inbox (SPEC §12): server-rendered pages over the pending calls
// (read through the pending desk, as `agent pending` and the API read
// them), with plain HTML forms that publish decisions and answers
// through it, and a small inline script for live updates when
// JavaScript runs.

//go:embed templates/*.html
var templateFS embed.FS

// pages are the inbox's templates, one per page, each with the layout.
var pages = func() map[string]*template.Template {
	funcs := template.FuncMap{"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	}, "card": func(it item, page map[string]any) map[string]any {
		return map[string]any{"It": it, "P": page}
	}}
	out := map[string]*template.Template{}
	for _, name := range []string{"login", "inbox", "timeline", "conversations", "message", "links", "confirm"} {
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/card.html", "templates/"+name+".html"))
	}
	return out
}()

// item is a pending call as the inbox shows it.
type item struct {
	Conversation, Task, Tool, ToolCallID, Agent, Prompt string
	// Kind is "approval" or "external".
	Kind string
	// Args are the call's arguments, pretty-printed; Digest their
	// args_digest, sent back with a decision.
	Args, Digest string
	// Requested is when the call was deferred (its task ID's time); Age
	// the time since.
	Requested time.Time
	Age       string
	// Expires is when the approval's timeout decides (zero: never), and
	// OnTimeout what it decides.
	Expires   time.Time
	OnTimeout string
	// EditArgs and Error are a refused form's arguments and why, shown at
	// the field; Answer a refused answer's content.
	EditArgs, Error, Answer string
	// Required is an approval's quorum (above 1: that many approvers),
	// ApprovedBy who approved it so far.
	Required   int
	ApprovedBy []string
	// Description is the tool's (what approving runs), StartedBy who
	// started the conversation (SPEC §21).
	Description, StartedBy string
	// Of is how many calls of the conversation's pause a person decides,
	// Next which decision of them the next is, Others how many wait
	// besides this one ([positions]); waiting how many of them wait, as
	// the desk read them (pending.Call.Waiting).
	Of, Next, Others int
	waiting          int
	// Asks is what the server behind an external call asks (an MCP
	// elicitation, SPEC §16): a form from its requested schema, or a URL
	// to open; nil for any other external call.
	Asks *asks
}

// refused is a form the inbox shows again at its call, with why.
type refused struct {
	task, error, args, answer string
	fields                    []askField // an elicitation's form as it was sent
}

// items returns a page of the calls waiting for a person across
// conversations (approvals and external calls, nothing stored for them
// yet), oldest first, from the request's ?cursor=, and the next page's
// cursor ("" on the last).
func (h *handler) items(r *http.Request) ([]item, string, error) {
	page, err := h.pageOf(r, pending.Filter{Kinds: pending.ForPeople})
	if err != nil {
		return nil, "", err
	}
	out := make([]item, 0, len(page.Calls))
	for _, c := range page.Calls {
		out = append(out, h.itemOf(c))
	}
	slices.SortFunc(out, func(a, b item) int { return strings.Compare(a.Task, b.Task) }) // task IDs sort by time
	positions(out)
	return out, page.Next, nil
}

// positions sets each item's Next and Others from the items of its
// conversation among items: "decision 1 of 2", one other waits.
func positions(items []item) {
	waiting := map[string]int{}
	for _, it := range items {
		waiting[it.Conversation]++
	}
	for i := range items {
		// Its conversation's calls on this page, or all of them when
		// some are on another page.
		w := max(waiting[items[i].Conversation], items[i].waiting)
		items[i].Of = max(items[i].Of, w)
		items[i].Next, items[i].Others = items[i].Of-w+1, w-1
	}
}

// itemOf is call c as the inbox shows it.
func (h *handler) itemOf(c pending.Call) item {
	it := item{Conversation: c.ConversationID, Task: c.TaskID, Tool: c.Tool, ToolCallID: c.ToolCallID, Agent: c.Agent,
		Prompt: c.Prompt, Kind: string(c.Kind), Args: pretty(c.Args), Expires: c.Expires, OnTimeout: c.OnTimeout,
		Description: c.Description, StartedBy: c.StartedBy, Of: c.Of, waiting: c.Waiting}
	it.EditArgs = it.Args
	if c.Kind == deferred.KindExternal {
		it.Asks = asksOf(c.Metadata)
	}
	it.Digest, _ = protocol.ArgsDigest(c.Args)
	if c.Required > 1 {
		it.Required = c.Required
		for _, v := range c.Approvals {
			it.ApprovedBy = append(it.ApprovedBy, v.By)
		}
	}
	if at := c.Requested(); !at.IsZero() {
		it.Requested, it.Age = at, age(h.Now().Sub(at))
	}
	return it
}

// pretty returns args indented, or as they are when they do not parse.
func pretty(args json.RawMessage) string {
	if len(bytes.TrimSpace(args)) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, args, "", "  "); err != nil {
		return string(args)
	}
	return b.String()
}

// age is d as a person reads it: 42s, 3m, 5h, 2d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// notices are the outcomes a redirect after a form names (?done=).
var notices = map[string]string{
	"approved": "Approved.",
	"denied":   "Denied.",
	"answered": "Answered.",
}

// inboxPage is the inbox: every call waiting for a person.
func (h *handler) inboxPage(w http.ResponseWriter, r *http.Request) error {
	return h.showInbox(w, r, http.StatusOK, "", nil)
}

// showInbox renders the inbox with a notice, and a refused form shown
// again at its call.
func (h *handler) showInbox(w http.ResponseWriter, r *http.Request, code int, notice string, ref *refused) error {
	items, next, err := h.items(r)
	var ce *pending.CursorError
	if errors.As(err, &ce) {
		return err
	}
	if err != nil {
		return fmt.Errorf("the pending records cannot be read: %w", err)
	}
	if ref != nil {
		items = h.withRefused(r, items, ref.task)
		for i := range items {
			if items[i].Task == ref.task {
				items[i].Error, items[i].Answer = ref.error, ref.answer
				if ref.args != "" {
					items[i].EditArgs = ref.args
				}
				if ref.fields != nil && items[i].Asks != nil {
					items[i].Asks.Fields = ref.fields
				}
			}
		}
	}
	if notice == "" {
		notice = noticeOf(r.URL.Query())
	}
	queued, err := h.Desk.Queued(r.Context(), pending.Filter{})
	if err != nil {
		return fmt.Errorf("the tools' queues cannot be read: %w", err)
	}
	c := callerOf(r)
	h.render(w, r, code, "inbox", map[string]any{"Items": items, "Queued": queued, "Next": next, "Cursor": r.URL.Query().Get("cursor") != "", "Limit": r.URL.Query().Get("limit"), "Notice": notice, "Who": c.Name, "Role": c.Identity.String(),
		"MayDecide": c.may(RoleApprover), "MayAnswer": c.may(RoleAnswerer), "Links": h.Links != nil})
	return nil
}

// withRefused returns items with the call of task, a refused form's
// whose conversation the form names, first when the page does not show
// it (a form sent from a later page).
func (h *handler) withRefused(r *http.Request, items []item, task string) []item {
	if slices.ContainsFunc(items, func(it item) bool { return it.Task == task }) {
		return items
	}
	c, err := h.Desk.Call(r.Context(), r.PathValue("id"), task)
	if err != nil {
		return items
	}
	return append([]item{h.itemOf(*c)}, items...)
}

// inboxDecide publishes a decision given with the inbox's form: approve,
// deny with a reason, or approve with edited arguments (checked against
// the tool's schema first: a failure is shown at the field and nothing
// is published). Its by is the session's token's NAME; its args_digest
// the one of the arguments the form showed.
func (h *handler) inboxDecide(w http.ResponseWriter, r *http.Request) error {
	conv, task := r.PathValue("id"), r.PathValue("task")
	digest := r.PostForm.Get("args_digest")
	if !protocol.ValidDigest(digest) {
		return badRequest("The form carries no valid args_digest: reload the page.")
	}
	d := protocol.Decision{By: callerOf(r).Name, ArgsDigest: digest, Channel: protocol.ChannelInbox}
	done, edited := "approved", ""
	switch r.PostForm.Get("action") {
	case "approve":
		d.Approved = true
	case "deny":
		d.Message, done = strings.TrimSpace(r.PostForm.Get("reason")), "denied"
	case "edit":
		d.Approved = true
		edited = r.PostForm.Get("args")
		d.OverrideArgs = json.RawMessage(cmp.Or(strings.TrimSpace(edited), "{}"))
	default:
		return badRequest("Unknown action.")
	}
	after := h.outcome(r, conv, task, done)
	_, err := h.Desk.Decide(r.Context(), conv, task, d)
	return h.published(w, r, task, after, err, &refused{task: task, args: edited})
}

// inboxAnswer publishes an answer to an external call: the form's
// content, as JSON when it is a JSON value, else as a string; for a
// server's elicitation (SPEC §16), the fields of the form made from its
// requested schema (action accept: the content, checked and typed as the
// schema says) or its refusal (action decline: a failed result with the
// reason, which the server is told as a decline).
func (h *handler) inboxAnswer(w http.ResponseWriter, r *http.Request) error {
	conv, task := r.PathValue("id"), r.PathValue("task")
	content := strings.TrimSpace(r.PostForm.Get("content"))
	raw := json.RawMessage(content)
	if !json.Valid(raw) {
		raw, _ = json.Marshal(content)
	}
	res := protocol.Result{TaskID: task, Status: protocol.StatusOK}
	switch r.PostForm.Get("action") {
	case "decline":
		res.Status, res.Message = protocol.StatusFailed, cmp.Or(strings.TrimSpace(r.PostForm.Get("reason")), "declined in the inbox")
	case "accept":
		c, err := h.Desk.Call(r.Context(), conv, task)
		if errors.Is(err, pending.ErrNotPending) {
			return h.showInbox(w, r, http.StatusConflict, "That call was already resolved, or is no longer pending.", nil)
		}
		if err != nil {
			return err
		}
		a := asksOf(c.Metadata)
		if a == nil || a.Fields == nil && a.URL == "" {
			return badRequest("That call asks for no form: answer with its content.")
		}
		if a.Fields == nil { // URL mode: done there, accepted here
			raw = json.RawMessage(`{}`)
			break
		}
		fields, sent, err := contentOf(a.Fields, r.PostForm)
		if err != nil {
			return h.showInbox(w, r, http.StatusUnprocessableEntity, "", &refused{task: task, error: err.Error(), fields: sent})
		}
		raw = fields
	}
	res.Content = raw
	if res.Status != protocol.StatusOK {
		res.Content = nil
	}
	data, err := json.Marshal(res)
	if err != nil {
		return badRequest("%s", err.Error())
	}
	after := h.outcome(r, conv, task, "answered")
	_, err = h.Desk.AnswerAs(r.Context(), conv, task, data, callerOf(r).Name, protocol.ChannelInbox)
	return h.published(w, r, task, after, err, &refused{task: task, answer: content})
}

// toolName is what a redirect's tool= may hold.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// outcome is where a form's redirect goes once its decision or answer of
// task is published (done: approved, denied, answered): its form's back
// (the conversation's page) or the inbox, with a notice that names the
// call and says which decision of its conversation's it was ("decision 1
// of 2", SPEC §21), as the calls waiting before it say.
func (h *handler) outcome(r *http.Request, conv, task, done string) string {
	to := "/"
	if r.PostForm.Get("back") == "/conversations/"+conv {
		to = "/conversations/" + conv
	}
	q := url.Values{"done": {done}, "task": {task}}
	calls, err := h.Desk.Calls(r.Context(), pending.Filter{Conversation: conv, Kinds: pending.ForPeople})
	if err == nil {
		for _, c := range calls {
			if c.TaskID == task {
				of := max(c.Of, len(calls))
				q.Set("tool", c.Tool)
				if of > 1 {
					q.Set("n", strconv.Itoa(of-len(calls)+1))
					q.Set("of", strconv.Itoa(of))
				}
			}
		}
	}
	return to + "?" + q.Encode()
}

// noticeOf is the notice a page shows after a redirect's query q
// ([handler.outcome]): what was done, to which call, and which decision
// of its conversation's it was; "" when q says nothing done.
func noticeOf(q url.Values) string {
	base, ok := notices[q.Get("done")]
	if !ok {
		return ""
	}
	tool, task := q.Get("tool"), q.Get("task")
	if _, err := protocol.ParseID(task); err != nil || !toolName.MatchString(tool) {
		return base
	}
	msg := fmt.Sprintf("%s %s (task %s).", strings.TrimSuffix(base, "."), tool, task)
	n, err1 := strconv.Atoi(q.Get("n"))
	of, err2 := strconv.Atoi(q.Get("of"))
	if err1 != nil || err2 != nil || of < 2 || n < 1 || n > of || of > 10000 {
		return msg
	}
	left := of - n
	switch left {
	case 0:
		return msg + fmt.Sprintf(" Decision %d of %d of its conversation: none waits now, it continues.", n, of)
	case 1:
		return msg + fmt.Sprintf(" Decision %d of %d of its conversation: 1 more waits.", n, of)
	}
	return msg + fmt.Sprintf(" Decision %d of %d of its conversation: %d more wait.", n, of, left)
}

// published answers a form once its decision or answer was published (err
// nil: redirect to after, [handler.outcome]) or refused (the inbox
// again: with why at the call, the form as it was sent in ref).
func (h *handler) published(w http.ResponseWriter, r *http.Request, task, after string, err error, ref *refused) error {
	var (
		re *conversation.RefusedError
		ae *pending.ArgsError
	)
	switch {
	case err == nil:
		http.Redirect(w, r, after, http.StatusSeeOther)
		return nil
	case errors.As(err, &ae):
		ref.error = ae.Message
		return h.showInbox(w, r, http.StatusUnprocessableEntity, "", ref)
	case errors.As(err, &re) && (re.Reason == conversation.ReasonDuplicate || re.Reason == conversation.ReasonUnknownTask):
		return h.showInbox(w, r, http.StatusConflict, "That call was already resolved, or is no longer pending.", nil)
	case errors.As(err, &re) && re.Reason == conversation.ReasonStale:
		return h.showInbox(w, r, http.StatusConflict, "The call's arguments changed since the page was shown: nothing was published. Look again.", nil)
	case errors.As(err, &re):
		ref.error, ref.args = re.Err.Error(), ""
		return h.showInbox(w, r, http.StatusUnprocessableEntity, "", ref)
	}
	h.Logger.Error("inbox: publish", slog.String("task_id", task), slog.Any("error", err))
	return fmt.Errorf("not published: %w", err)
}

// inboxChanges is the inbox's live stream (Server-Sent Events): an event
// "changed" whenever what waits may have changed, until the client goes;
// every open inbox of the replica follows one watch ([changes]).
func (h *handler) inboxChanges(w http.ResponseWriter, r *http.Request) error {
	s, err := sse.New(w, h.Limits.Heartbeat)
	if err != nil {
		return err
	}
	defer s.Close()
	ch, unsubscribe, err := h.changes.subscribe(r.Context())
	if err != nil {
		return err
	}
	defer unsubscribe()
	s.Signals(r.Context(), ch, "watching the pending records", "changed")
	return nil
}

// render executes page with data (the page's CSP nonce and, unless data
// has one (the login form's), the session's CSRF token added).
func (h *handler) render(w http.ResponseWriter, r *http.Request, code int, page string, data map[string]any) {
	data["Nonce"], _ = r.Context().Value(nonceKey).(string)
	c := callerOf(r)
	if _, ok := data["CSRF"]; !ok {
		data["CSRF"] = c.csrf
	}
	data["LoggedIn"] = c.token != ""
	if _, ok := data["Who"]; !ok {
		data["Who"] = c.Name
	}
	var b bytes.Buffer
	if err := pages[page].Execute(&b, data); err != nil {
		h.Logger.Error("inbox: render", slog.String("page", page), slog.Any("error", err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// message renders a page saying msg under title.
func (h *handler) message(w http.ResponseWriter, r *http.Request, code int, title, msg string) {
	h.render(w, r, code, "message", map[string]any{"Title": title, "Message": msg})
}
