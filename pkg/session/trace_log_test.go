package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
	"github.com/offload-dev/offload/pkg/telemetry"
	"github.com/offload-dev/offload/pkg/tool"
)

// downAnnouncer is an Announcer whose server is gone.
type downAnnouncer struct{}

func (downAnnouncer) Announce(context.Context, *deferred.PendingRecord) error {
	return errors.New("no server")
}

func (downAnnouncer) Resolve(context.Context, string, protocol.Resolution) error {
	return errors.New("no server")
}

// The approval path's log lines (an announcement and a resolution not
// published, while --approve wait waits within a traced run) carry the
// run's trace_id through telemetry.LogHandler, as the binaries log.
func TestApprovalLogLinesCarryTheTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := conversation.NewMemory()
	id := protocol.NewID()
	if _, err := store.Save(ctx, &conversation.State{ID: id}, 0); err != nil {
		t.Fatal(err)
	}
	task := protocol.NewID()
	in := &watchedInbox{signal: make(chan struct{}, 1), reads: make(chan struct{}, 8), task: task, send: true}
	var logs offloadtest.Output
	s, err := session.Open(ctx, session.Config{Store: store, Inbox: in, Announcer: downAnnouncer{},
		Logger: slog.New(telemetry.LogHandler(slog.NewJSONHandler(&logs, nil)))}, id, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	runCtx, run := tp.Tracer("test").Start(ctx, "invoke_agent")
	defer run.End()
	call := message.ToolCall{ToolName: "deploy", ToolCallID: "call_1", Args: `{}`}
	reqs := &deferred.Requests{Approvals: []message.ToolCall{call}, TaskIDs: map[string]string{call.ToolCallID: task}}
	if _, err := s.AwaitDecisionsHandler(time.Minute, nil)(runCtx, &tool.RunContext{RunID: protocol.NewID(), ConversationID: id}, reqs); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`"trace_id":%q`, run.SpanContext().TraceID().String())
	for _, msg := range []string{"approvals not announced", "resolution not published"} {
		line := ""
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg":"`+msg+`"`) {
				line = l
			}
		}
		if !strings.Contains(line, want) {
			t.Errorf("log line %q: %q, want %s", msg, line, want)
		}
	}
}
