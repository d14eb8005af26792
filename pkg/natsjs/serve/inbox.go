package serve

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The web inbox (SPEC §12): server-rendered pages over the people's
// pending records (the pending bucket, read through convstore.Pending as
// `agent pending` and the API read them), with plain HTML forms that
// publish decisions and answers through the API's [Publisher], and a
// small inline script for live updates when JavaScript runs.

//go:embed templates/*.html
var templateFS embed.FS

// pages are the inbox's templates, one per page, each with the layout.
var pages = func() map[string]*template.Template {
	funcs := template.FuncMap{"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	}}
	out := map[string]*template.Template{}
	for _, name := range []string{"login", "inbox", "timeline", "message", "links", "confirm"} {
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return out
}()

// inbox serves the web inbox on the API's handler.
type inbox struct {
	h   *handler
	now func() time.Time
}

// mountInbox adds the inbox's routes to mux.
func mountInbox(mux *http.ServeMux, h *handler) {
	in := &inbox{h: h, now: time.Now}
	mux.HandleFunc("GET /login", secure(in.loginPage))
	mux.HandleFunc("POST /login", secure(in.login))
	mux.HandleFunc("POST /logout", secure(in.loggedIn(in.logout)))
	mux.HandleFunc("GET /{$}", secure(in.loggedIn(in.list)))
	mux.HandleFunc("GET /inbox/events", in.loggedIn(in.changes))
	mux.HandleFunc("POST /conversations/{id}/calls/{task}/decide", secure(in.loggedIn(in.decide)))
	mux.HandleFunc("POST /conversations/{id}/calls/{task}/answer", secure(in.loggedIn(in.answer)))
	mux.HandleFunc("GET /conversations/{id}", secure(in.loggedIn(in.timeline)))
	mux.HandleFunc("GET /conversations/{id}/events", in.loggedIn(h.events))
	if h.Links != nil {
		mux.HandleFunc("POST /conversations/{id}/calls/{task}/links", secure(in.loggedIn(in.mintLinks)))
		mux.HandleFunc("GET /links/{token}", secure(in.link))
		mux.HandleFunc("POST /links/{token}", secure(in.useLink))
	}
}

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
}

// refused is a form the inbox shows again at its call, with why.
type refused struct {
	task, error, args, answer string
}

// items returns the calls waiting for a person across conversations
// (approvals and external calls, nothing stored for them yet), oldest
// first.
func (in *inbox) items(ctx context.Context, p *convstore.Pending) ([]item, error) {
	ids, err := p.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []item
	for _, id := range ids {
		s, err := p.Get(ctx, id)
		if errors.Is(err, conversation.ErrNotFound) {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, err
		}
		waiting, err := p.Waiting(ctx, s)
		if err != nil {
			return nil, err
		}
		for _, t := range waiting {
			if t.Kind != deferred.KindApproval && t.Kind != deferred.KindExternal {
				continue
			}
			out = append(out, in.itemOf(ctx, s, t))
		}
	}
	slices.SortFunc(out, func(a, b item) int { return strings.Compare(a.Task, b.Task) }) // task IDs sort by time
	return out, nil
}

func (in *inbox) itemOf(ctx context.Context, s *conversation.Summary, t deferred.PendingTask) item {
	it := item{Conversation: s.ConversationID, Task: t.TaskID, Tool: t.Tool, ToolCallID: t.ToolCallID, Agent: s.Agent,
		Prompt: s.Prompt, Kind: string(t.Kind), Args: pretty(t.Args)}
	it.EditArgs = it.Args
	it.Digest, _ = protocol.ArgsDigest(t.Args)
	if t.Required > 1 {
		it.Required = t.Required
		for _, v := range s.State().VotesFor(t.TaskID) {
			it.ApprovedBy = append(it.ApprovedBy, v.By)
		}
	}
	if id, err := protocol.ParseID(t.TaskID); err == nil {
		it.Requested = id.Timestamp().UTC()
		it.Age = age(in.now().Sub(it.Requested))
		if t.Kind == deferred.KindApproval && (in.h.Service.cfg.Expirer != nil || in.h.Service.cfg.Timers != nil) {
			if p := in.h.Service.policy(ctx, s.Agent, t.Tool); p != nil {
				// The timeout counts from the announcement, at the
				// deferral (the task ID's time) give or take its save.
				it.Expires, it.OnTimeout = it.Requested.Add(p.Timeout), p.OnTimeout
			}
		}
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

// list is the inbox: every call waiting for a person.
func (in *inbox) list(w http.ResponseWriter, r *http.Request) {
	in.showList(w, r, http.StatusOK, "", nil)
}

// showList renders the inbox with a notice, and a refused form shown
// again at its call.
func (in *inbox) showList(w http.ResponseWriter, r *http.Request, code int, notice string, ref *refused) {
	items, err := in.items(r.Context(), in.h.Inbox)
	if err != nil {
		in.h.Logger.Error("inbox: read the pending records", slog.Any("error", err))
		in.fail(w, r, http.StatusInternalServerError, "The pending records cannot be read: "+err.Error())
		return
	}
	if ref != nil {
		for i := range items {
			if items[i].Task == ref.task {
				items[i].Error, items[i].Answer = ref.error, ref.answer
				if ref.args != "" {
					items[i].EditArgs = ref.args
				}
			}
		}
	}
	if notice == "" {
		notice = notices[r.URL.Query().Get("done")]
	}
	s := sessionOf(r)
	in.render(w, r, code, "inbox", map[string]any{"Items": items, "Notice": notice, "Who": s.Name, "Role": string(s.Role),
		"MayDecide": s.may(RoleApprover), "MayAnswer": s.may(RoleAnswerer), "Links": in.h.Links != nil})
}

// decide publishes a decision given with the inbox's form: approve, deny
// with a reason, or approve with edited arguments (checked against the
// tool's schema first: a failure is shown at the field and nothing is
// published). Its by is the session's token's NAME; its args_digest the
// one of the arguments the form showed.
func (in *inbox) decide(w http.ResponseWriter, r *http.Request) {
	conv, task := r.PathValue("id"), r.PathValue("task")
	s := sessionOf(r)
	if !s.may(RoleApprover) {
		in.fail(w, r, http.StatusForbidden, "Role "+string(s.Role)+" may not decide approvals.")
		return
	}
	digest := r.PostFormValue("args_digest")
	if !protocol.ValidDigest(digest) {
		in.fail(w, r, http.StatusBadRequest, "The form carries no valid args_digest: reload the page.")
		return
	}
	d := protocol.Decision{By: s.Name, ArgsDigest: digest, Channel: protocol.ChannelInbox}
	done := "approved"
	switch r.PostFormValue("action") {
	case "approve":
		d.Approved = true
	case "deny":
		d.Message, done = strings.TrimSpace(r.PostFormValue("reason")), "denied"
	case "edit":
		d.Approved = true
		edited := r.PostFormValue("args")
		args, err := in.h.checkArgs(r.Context(), conv, task, edited)
		if err != nil {
			in.showList(w, r, http.StatusUnprocessableEntity, "", &refused{task: task, error: err.Error(), args: edited})
			return
		}
		d.OverrideArgs = args
	default:
		in.fail(w, r, http.StatusBadRequest, "Unknown action.")
		return
	}
	in.published(w, r, task, done, in.h.Publisher.Decide(r.Context(), conv, task, d), "")
}

// answer publishes an answer to an external call: the form's content,
// as JSON when it is a JSON value, else as a string.
func (in *inbox) answer(w http.ResponseWriter, r *http.Request) {
	conv, task := r.PathValue("id"), r.PathValue("task")
	s := sessionOf(r)
	if !s.may(RoleAnswerer) {
		in.fail(w, r, http.StatusForbidden, "Role "+string(s.Role)+" may not answer external calls.")
		return
	}
	content := strings.TrimSpace(r.PostFormValue("content"))
	raw := json.RawMessage(content)
	if !json.Valid(raw) {
		raw, _ = json.Marshal(content)
	}
	data, err := json.Marshal(protocol.Result{TaskID: task, Status: protocol.StatusOK, Content: raw})
	if err != nil {
		in.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	in.published(w, r, task, "answered", in.h.Publisher.Publish(r.Context(), conversation.ArrivalAnswer, conv, task, data), content)
}

// published answers a form once its decision or answer was published (err
// nil: redirect to the inbox with done's notice) or refused (the inbox
// again, with why at the call).
func (in *inbox) published(w http.ResponseWriter, r *http.Request, task, done string, err error, answer string) {
	var re *conversation.RefusedError
	switch {
	case err == nil:
		http.Redirect(w, r, "/?done="+done, http.StatusSeeOther)
	case errors.As(err, &re) && (re.Reason == conversation.ReasonDuplicate || re.Reason == conversation.ReasonUnknownTask):
		in.showList(w, r, http.StatusConflict, "That call was already resolved, or is no longer pending.", nil)
	case errors.As(err, &re) && re.Reason == conversation.ReasonStale:
		in.showList(w, r, http.StatusConflict, "The call's arguments changed since the page was shown: nothing was published. Look again.", nil)
	case errors.As(err, &re):
		in.showList(w, r, http.StatusUnprocessableEntity, "", &refused{task: task, error: re.Err.Error(), answer: answer})
	default:
		in.h.Logger.Error("inbox: publish", slog.String("task_id", task), slog.Any("error", err))
		in.fail(w, r, http.StatusInternalServerError, "Not published: "+err.Error())
	}
}

// changes is the inbox's live stream (Server-Sent Events): an event
// "changed" whenever a pending record is written or deleted, until the
// client goes.
func (in *inbox) changes(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		in.fail(w, r, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	ch, err := in.h.Inbox.Changes(r.Context())
	if err != nil {
		in.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(": watching the pending records\n\n"))
	fl.Flush()
	for range ch {
		if _, err := w.Write([]byte("event: changed\ndata: {}\n\n")); err != nil {
			return
		}
		fl.Flush()
	}
}

// render executes page with data (the page's CSP nonce and the session's
// CSRF token added).
func (in *inbox) render(w http.ResponseWriter, r *http.Request, code int, page string, data map[string]any) {
	data["Nonce"], _ = r.Context().Value(nonceKey{}).(string)
	s := sessionOf(r)
	data["CSRF"], data["LoggedIn"] = s.csrf, s.token != ""
	if _, ok := data["Who"]; !ok {
		data["Who"] = s.Name
	}
	var b bytes.Buffer
	if err := pages[page].Execute(&b, data); err != nil {
		in.h.Logger.Error("inbox: render", slog.String("page", page), slog.Any("error", err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// fail renders a page saying what went wrong.
func (in *inbox) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	in.render(w, r, code, "message", map[string]any{"Title": http.StatusText(code), "Message": msg})
}
