package convstore_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/offload-dev/offload"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// definitionsWith returns the definitions with stream's fields changed.
func definitionsWith(t *testing.T, stream string, fields map[string]any) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(offload.Definitions(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(offload.Definitions(), path)
		if err != nil {
			return err
		}
		if path == "streams/"+stream+".json" {
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				return err
			}
			for k, v := range fields {
				m[k] = v
			}
			if data, err = json.Marshal(m); err != nil {
				return err
			}
		}
		out[path] = &fstest.MapFile{Data: data}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An announcement the approvals stream refuses at a limit is a
// *natsjs.LimitError naming it, counted in
// offload_publish_refused_total{stream,limit}.
func TestAnnouncementRefusedAtALimitIsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	am := metrics.NewAgent(prometheus.NewRegistry())
	convs, err := convstore.Open(t.Context(), convstore.OpenConfig{JetStream: b.js, Metrics: am,
		Provision: natsjs.ProvisionOptions{FS: definitionsWith(t, "TOOLS_APPROVALS", map[string]any{"max_msg_size": 256})}})
	if err != nil {
		t.Fatal(err)
	}
	conv := protocol.NewID()
	rec := &deferred.PendingRecord{ConversationID: conv, RunID: protocol.NewID(), Tasks: []deferred.PendingTask{
		{TaskID: protocol.NewID(), Kind: deferred.KindApproval, Tool: "shell", ToolCallID: "c1", Args: []byte(`{"command":"` + strings.Repeat("x", 300) + `"}`)},
	}}
	err = convs.Announcer.Announce(t.Context(), rec)
	var le *natsjs.LimitError
	if !errors.As(err, &le) || le.Limit != natsjs.LimitMsgSize || !errors.Is(err, natsjs.ErrLimitReached) {
		t.Fatalf("announce over max_msg_size: %v", err)
	}
	if n := testutil.ToFloat64(am.PublishRefusedTotal.WithLabelValues("TOOLS_APPROVALS", natsjs.LimitMsgSize)); n != 1 {
		t.Errorf("offload_publish_refused_total = %v, want 1", n)
	}
}
