package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/tool"
)

type noteArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// slowNote is the demo's write_file, served by a worker in the test: it
// needs approval and writes nothing until release is closed.
func slowNote(t *testing.T, srv *natstest.Server, release <-chan struct{}) {
	t.Helper()
	note := tool.Func("write_file", "Write a file.", func(ctx context.Context, _ *tool.RunContext, a noteArgs) (map[string]any, error) {
		select {
		case <-release:
			return map[string]any{"path": a.Path, "bytes_written": len(a.Content)}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, tool.NeedsApproval())
	w, err := worker.New(worker.Config{Conn: srv.Conn(t), ID: "notes", Tools: []*tool.Tool{note}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.StopAndCancel(ctx)
	})
}

// The demo's scripted model (examples/demo/run.yaml) tells the whole story
// when the background tasks end before the release note is written, as on
// a slow machine: the agent still calls ask_human and pauses (exit 3),
// whether the tests' follow-up or both follow-ups come with the note's
// result (issue 22: the script answered by count, and the run ended
// before the question).
func TestDemoScriptWhenTasksEndBeforeTheNote(t *testing.T) {
	t.Parallel()
	twBin, agentBin := binaries(t)
	spec, err := filepath.Abs("../../examples/demo/agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../examples/demo/run.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		after int // background tasks finished before the note is written
	}{{"tests done before the note", 1}, {"both done before the note", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			startWorker(t, twBin, "--nats", srv.URL(), "--tools", "sleep", "--id", "demo")
			release := make(chan struct{})
			slowNote(t, srv, release)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, agentBin, "run", "--nats", srv.URL(), "--spec", spec, "--approve", "all",
				"--model", "script:"+script, "--json", "Ship the release.")
			cmd.Dir = t.TempDir()
			p := startPipedJSON(t, cmd)
			var calls []string
			finished := 0
			last := p.events(t, func(ev map[string]any) {
				switch ev["type"] {
				case "tool_call":
					calls = append(calls, ev["tool"].(string))
				case "background_task_finished":
					if finished++; finished == tc.after {
						close(release) // the note is written only now
					}
				}
			})
			err := cmd.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(calls, " "); code != 3 || last["status"] != "paused" || got != "sleep sleep write_file ask_human" {
				t.Errorf("exit %d, final %v, calls %q; want exit 3, paused on ask_human after sleep sleep write_file\nstderr: %s", code, last, got, p.stderr.String())
			}
		})
	}
}

// pipedJSON is a process whose --json stdout is read line by line.
type pipedJSON struct {
	dec    *json.Decoder
	stderr *bytes.Buffer
}

func startPipedJSON(t *testing.T, cmd *exec.Cmd) *pipedJSON {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &pipedJSON{dec: json.NewDecoder(out), stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// events calls each with every event until stdout ends and returns the
// last one.
func (p *pipedJSON) events(t *testing.T, each func(map[string]any)) map[string]any {
	t.Helper()
	var last map[string]any
	for {
		var ev map[string]any
		if err := p.dec.Decode(&ev); err != nil {
			return last
		}
		each(ev)
		last = ev
	}
}
