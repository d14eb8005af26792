package web

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/events"
	"github.com/ag-ui-protocol/ag-ui/sdks/community/go/pkg/core/types"

	"github.com/offload-dev/offload/pkg/agui"
	"github.com/offload-dev/offload/pkg/service"
	"github.com/offload-dev/offload/pkg/sse"
)

// aguiRun serves POST /agui/{agent} (SPEC §18): a RunAgentInput in, its
// AG-UI events out on the one SSE writer; package agui translates. The
// row admits the roles that act through an input (operator: a new turn;
// approver and answerer: a resume's decisions and answers), and agui
// refuses what the caller's role may not do.
func (h *handler) aguiRun(w http.ResponseWriter, r *http.Request) error {
	var in types.RunAgentInput
	if err := decodeBody(r, &in, "an AG-UI RunAgentInput"); err != nil {
		return err
	}
	c := callerOf(r)
	ctx := r.Context()
	if c.Tenant != "" {
		// A token bound to a tenant runs its tenant's threads only, as
		// over the API (tenantContext): a new thread is its tenant's, an
		// existing one of another tenant is 403 wrong_tenant.
		ctx = service.WithTenant(ctx, c.Tenant)
	}
	caller := agui.Caller{Name: c.Name, Start: c.may(operators...), Decide: c.may(approvers...), Answer: c.may(answerers...)}
	s, err := sse.New(w, h.Limits.Heartbeat)
	if err != nil {
		return err
	}
	defer s.Close()
	return h.aguiStream(r, s, func(_ *bool, emit agui.Emit) error {
		return h.AGUI.Run(ctx, r.PathValue("agent"), caller, in, emit)
	})
}

// aguiJoin serves GET /agui/{agent}/threads/{thread}/events (SPEC §18):
// a thread's AG-UI events as its runs emit them, to any role; a
// reconnect's Last-Event-ID resumes after its last event, on any replica.
func (h *handler) aguiJoin(w http.ResponseWriter, r *http.Request) error {
	s, err := sse.New(w, h.Limits.Heartbeat)
	if err != nil {
		return err
	}
	defer s.Close()
	return h.aguiStream(r, s, func(opened *bool, emit agui.Emit) error {
		return h.AGUI.Join(r.Context(), r.PathValue("agent"), r.PathValue("thread"), r.Header.Get("Last-Event-ID"), func() {
			*opened = s.Open("") == nil
		}, emit)
	})
}

// aguiStream runs one of the face's streams on s, opened at its first
// event (or when run sets opened): an error before it is the request's
// answer (an agui.InputError its status), one after it is logged.
func (h *handler) aguiStream(r *http.Request, s *sse.Writer, run func(opened *bool, emit agui.Emit) error) error {
	opened := false
	err := run(&opened, func(id string, ev events.Event) error {
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if !opened {
			if err := s.Open(""); err != nil {
				return err
			}
			opened = true
		}
		return s.Event(id, "", data)
	})
	if !opened {
		var ie *agui.InputError
		if errors.As(err, &ie) {
			return errorf(ie.Status, ie.Code, "%s", ie.Message)
		}
		return err
	}
	if err != nil && r.Context().Err() == nil {
		h.Logger.Warn("agui", slog.String("agent", r.PathValue("agent")), slog.Any("error", err))
	}
	return nil
}
