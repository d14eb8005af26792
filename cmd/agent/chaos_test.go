//go:build chaos

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/mcptest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/llm/script"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

// chaosScript is the chaos's command tool: it appends its idempotency key
// ("<task>:<attempt>") to <name>.log before it works (a second or so), so
// that every execution is counted, also one a SIGKILL interrupted.
const chaosScript = `#!/bin/sh
d="$(dirname "$0")"
n="$(basename "$0" .sh)"
echo "$OFFLOAD_IDEMPOTENCY_KEY" >> "$d/$n.log"
sleep 0.$(( $$ % 8 + 2 ))
echo "$n done"
`

// chaosMCPScript is the command of the chaos's MCP server: the real
// server-everything (stdio), every message the worker sends it appended
// to mcp.log first, so that every tools/call is counted, also one a
// SIGKILL interrupted.
const chaosMCPScript = `#!/bin/sh
tee -a "$(dirname "$0")/mcp.log" | %q %q stdio
`

// chaosMCP is the chaos's MCP tool: server-everything's
// trigger-long-running-operation, which works for its duration argument
// (each call's is its own, 2.5 s and a few millionths: long enough for the
// workers' kills to hit some, and the call it logs is known by it),
// declared not idempotent in the worker's config (its annotations say
// idempotent).
const chaosMCP = "trigger-long-running-operation"

// chaosMCPArg matches the duration of a call of chaosMCP in mcp.log.
var chaosMCPArg = regexp.MustCompile(`"duration":(2\.5\d+)`)

// chaosTools are the tools of the chaos (name → the YAML keys of its
// entry beyond the command): every one but idem is not declared
// idempotent.
var chaosTools = []struct{ name, extra string }{
	{"inl", ""},
	{"idem", "idempotent: true"},
	{"bg", "metadata: {background: true}"},
	{"appr", "requires_approval: true"},
	{"nb", "requires_approval: true\n    metadata: {deferred: background}"},
}

// chaosPlans are the conversations' kinds: the calls of each step the
// model asks for, in order, then a text.
var chaosPlans = []struct {
	kind  string
	steps [][]string
}{
	{"inline", [][]string{{"inl", "idem"}, {"inl"}}},
	{"background", [][]string{{"bg", "inl"}}},
	{"approval", [][]string{{"appr", "inl"}}},
	{"non-blocking", [][]string{{"nb", "idem"}}},
	{"mcp", [][]string{{chaosMCP, "idem"}}},
}

// chaosModel is the model of the chaos: it answers by the plan of the
// conversation the request's first prompt names ("chaos <n>"), and keeps
// every request it was asked: which step of which conversation, and the
// call IDs of its answer.
type chaosModel struct {
	mu   sync.Mutex
	reqs []chaosRequest
	mcp  map[string]string // the duration of each call of chaosMCP → its call ID
}

type chaosRequest struct {
	conv, step int
	at         time.Time
	callIDs    []string
}

var chaosPrompt = regexp.MustCompile(`^chaos (\d+)$`)

func (m *chaosModel) answer(_ context.Context, req *llm.Request) (*llm.Response, error) {
	conv, steps := -1, 0
	for _, msg := range req.Messages {
		for _, p := range msg.Parts {
			switch x := p.(type) {
			case message.UserPrompt:
				for _, c := range x.Content {
					if g := chaosPrompt.FindStringSubmatch(c.Text); g != nil && conv < 0 {
						conv, _ = strconv.Atoi(g[1])
					}
				}
			}
		}
		if msg.Role == message.RoleResponse && len(msg.ToolCalls()) > 0 {
			steps++
		}
	}
	if conv < 0 {
		return nil, fmt.Errorf("chaos model: no conversation named in %d messages", len(req.Messages))
	}
	plan := chaosPlans[conv%len(chaosPlans)].steps
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.reqs)
	r := chaosRequest{conv: conv, step: steps, at: time.Now()}
	var parts []message.Part
	if steps < len(plan) {
		for k, name := range plan[steps] {
			id := fmt.Sprintf("r%d_%d", n, k)
			r.callIDs = append(r.callIDs, id)
			args := "{}"
			if name == chaosMCP {
				d := fmt.Sprintf("2.5%06d1", n*10+k) // its own, ending in 1: the text the log shows
				m.mcp[d] = id
				args = `{"duration":` + d + `,"steps":1}`
			}
			parts = append(parts, message.ToolCall{ToolName: name, ToolCallID: id, Args: args})
		}
	} else {
		parts = []message.Part{message.Text{Content: fmt.Sprintf("chaos %d done", conv)}}
	}
	m.reqs = append(m.reqs, r)
	return &llm.Response{Parts: parts}, nil
}

func (m *chaosModel) requests() []chaosRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reqs)
}

// TestChaos is `make chaos` (SPEC §20): CHAOS_CONVERSATIONS (default 40)
// conversations of five kinds (inline calls, a background call, an
// approval, a non-blocking approval, an MCP tool's call), started at a steady rate over the
// API of two agent serve replicas, with two toolworkers, on a nats-server
// process, while for CHAOS_FAULTS (default 60s) one of the processes is
// SIGKILLed every CHAOS_KILL_EVERY (default 3s) and
// restarted (a replica or a worker, at random from CHAOS_SEED; the
// nats-server every fifth kill). Every approval is granted by a person
// (the test) as it is seen. Then it checks and prints the invariants of
// §20: every conversation finished or waits for a person, no tool not
// declared idempotent ran twice for one attempt, no model request
// repeated for a stored step, no result lost.
func TestChaos(t *testing.T) {
	convs := chaosInt(t, "CHAOS_CONVERSATIONS", 40)
	faults := chaosDuration(t, "CHAOS_FAULTS", 60*time.Second)
	killEvery := chaosDuration(t, "CHAOS_KILL_EVERY", 3*time.Second)
	seed := chaosInt(t, "CHAOS_SEED", 1)
	// The MCP server is a dependency like the nats-server: missing, the
	// chaos fails (with how to install it) rather than skip.
	t.Setenv("OFFLOAD_REQUIRE_MCP", "1")
	node, everything := mcptest.EverythingScript(t)
	agentBinary(t)
	ns := natstest.StartNATSServer(t, natstest.BuildNATSServer(t, t.TempDir()))

	dir, tools := t.TempDir(), proctest.ToolDir(t)
	var cfg strings.Builder
	cfg.WriteString("tools:\n")
	var names []string
	for _, tl := range chaosTools {
		writeTestFile(t, filepath.Join(tools, tl.name+".sh"), chaosScript, 0o755)
		fmt.Fprintf(&cfg, "  - name: %s\n    description: Counts its runs.\n    command: [\"./%s.sh\"]\n    timeout: 30s\n", tl.name, tl.name)
		if tl.extra != "" {
			fmt.Fprintf(&cfg, "    %s\n", tl.extra)
		}
		names = append(names, tl.name)
	}
	writeTestFile(t, filepath.Join(tools, "mcp.sh"), fmt.Sprintf(chaosMCPScript, node, everything), 0o755)
	fmt.Fprintf(&cfg, "mcp_servers:\n  - name: everything\n    command: [%q]\n    tools: [%s]\n    timeout: 30s\n    overrides:\n      %s: {idempotent: false}\n",
		filepath.Join(tools, "mcp.sh"), chaosMCP, chaosMCP)
	names = append(names, chaosMCP)
	config := filepath.Join(tools, "tools.yaml")
	writeTestFile(t, config, cfg.String(), 0o644)

	model := &chaosModel{mcp: map[string]string{}}
	srv := openaitest.NewServer(script.New("fake-model", model.answer), openaitest.WithAPIKey("sk-test"))
	t.Cleanup(srv.Close)
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("OPENAI_BASE_URL", srv.URL())
	t.Setenv("NATS_URL", "")
	spec, tokens := filepath.Join(dir, "ops.yaml"), filepath.Join(dir, "tokens")
	writeTestFile(t, spec, "name: ops\nmodel: openai:fake-model\ntools: ["+strings.Join(names, ", ")+"]\n", 0o600)
	writeTestFile(t, tokens, serveOperator+" operator ops\n"+serveViewer+" viewer val\n", 0o600)

	workers := make([]*proctest.Process, 2)
	for i := range workers {
		workers[i] = proctest.StartProcess(t, toolworkerBinary(t), "--nats", ns.URL(), "--config", config, "--id", "chaos-w"+strconv.Itoa(i), "--ack-wait", "2s")
		workers[i].WaitLog(t, `"msg":"toolworker started"`, time.Minute)
	}
	replicas := make([]*proctest.Process, 2)
	urls := make([]string, 2)
	for i := range replicas {
		addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
		replicas[i] = proctest.StartProcess(t, agentBinary(t), "serve", "--nats", ns.URL(), "--spec", spec, "--tokens", tokens,
			"--http", addr, "--store", filepath.Join(dir, "store"), "-v")
		replicas[i].WaitLog(t, "agent serve: http://", time.Minute)
		urls[i] = "http://" + addr
	}
	nc, err := nats.Connect(ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := convstore.New(ctx, convstore.Config{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	c := &chaosClient{urls: urls, nc: nc, decided: map[string]bool{}, unknown: map[string]bool{}, unknownCalls: map[string]map[string]bool{}, mcpTasks: map[string]string{}}
	// Every stored revision of every conversation: when each answer of
	// the model (its call IDs) was first stored.
	watching, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	seen := &chaosSeen{at: map[string]time.Time{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		seen.watch(watching, js, store)
	}()
	began := time.Now()

	// The conversations, started at a steady rate while the faults go on;
	// a person approves whatever waits for one.
	ids := make([]string, convs)
	started := make(chan error, 1)
	go func() {
		for i := range convs {
			id, err := c.start(ctx, i)
			if err != nil {
				started <- err
				return
			}
			ids[i] = id
			time.Sleep(faults / time.Duration(convs)) // the rate, not a wait for a signal
		}
		started <- nil
	}()
	wg.Add(1)
	deciding, stopDeciding := context.WithCancel(ctx)
	defer stopDeciding()
	go func() {
		defer wg.Done()
		c.decide(deciding, func() []string {
			c.mu.Lock()
			defer c.mu.Unlock()
			return slices.Clone(c.ids)
		})
	}()

	// The faults.
	rnd := rand.New(rand.NewPCG(uint64(seed), 41)) //nolint:gosec // G404: a seeded, repeatable choice of faults, not a secret
	kills := map[string]int{}
	tick := time.NewTicker(killEvery)
	for i := 1; time.Since(began) < faults; i++ {
		<-tick.C
		switch {
		case i%5 == 0:
			ns.Kill()
			ns.Restart(t)
			kills["nats-server"]++
		case rnd.IntN(2) == 0:
			r := replicas[rnd.IntN(len(replicas))]
			r.Kill()
			r.Restart(t)
			r.WaitLog(t, "agent serve: http://", 2*time.Minute)
			kills["agent serve replica"]++
		default:
			w := workers[rnd.IntN(len(workers))]
			w.Kill()
			w.Restart(t)
			w.WaitLog(t, `"msg":"toolworker started"`, 2*time.Minute)
			kills["toolworker"]++
		}
	}
	tick.Stop()
	if err := <-started; err != nil {
		t.Fatalf("start: %v", err)
	}
	faultsEnded := time.Now()

	// Settle: until every conversation ended (finished, or failed: an
	// invariant broken), or 5 minutes.
	for settle := time.Now(); time.Since(settle) < 5*time.Minute; time.Sleep(time.Second) {
		ended := 0
		for _, id := range ids {
			if st := c.status(ctx, id); st == "finished" || st == "failed" {
				ended++
			}
		}
		if ended == len(ids) {
			break
		}
	}
	settled := time.Since(faultsEnded)
	stopDeciding()
	stopWatching()
	wg.Wait()

	// The invariants, from the stored conversations, the tools' logs and
	// the model's requests.
	var neither, waiting, finished int
	histories := map[int]message.History{}
	for i, id := range ids {
		st, _, err := store.Load(ctx, id)
		if err != nil {
			t.Fatalf("conversation %d (%s): %v", i, id, err)
		}
		histories[i] = st.History
		switch s := c.status(ctx, id); {
		case s == "finished":
			finished++
		case st.Pending != nil && len(st.Unresolved()) > 0 && s == "paused":
			waiting++
		default:
			neither++
			t.Logf("conversation %d (%s, %s): status %q, pending %+v\n%s", i, id, chaosPlans[i%len(chaosPlans)].kind, s, st.Pending,
				chaosLogs(id, st.Pending, append(slices.Clone(replicas), workers...)))
		}
	}
	// No tool not declared idempotent ran twice for one attempt.
	twice, runs, idemAgain := 0, map[string]int{}, 0
	for _, tl := range chaosTools {
		data, err := os.ReadFile(filepath.Join(tools, tl.name+".log"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, k := range strings.Fields(string(data)) {
			seen[k]++
			runs[tl.name]++
		}
		for k, n := range seen {
			switch {
			case n > 1 && tl.name == "idem":
				idemAgain += n - 1
			case n > 1:
				twice += n - 1
				t.Logf("%s ran %d times as %s", tl.name, n, k)
			}
		}
	}
	// Nor the MCP tool, known by its calls' durations: a call runs once
	// per attempt, and it has one attempt more for each unknown effect a
	// person approved (its worker died in a run).
	mcpLog, err := os.ReadFile(filepath.Join(tools, "mcp.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	mcpRuns := map[string]int{}
	for _, g := range chaosMCPArg.FindAllStringSubmatch(string(mcpLog), -1) {
		mcpRuns[g[1]]++
		runs[chaosMCP]++
	}
	model.mu.Lock()
	mcpCalls := maps.Clone(model.mcp)
	model.mu.Unlock()
	c.mu.Lock()
	for d, n := range mcpRuns {
		id := mcpCalls[d]
		if allowed := 1 + len(c.unknownCalls[id]); n > allowed {
			twice += n - allowed
			t.Logf("%s ran %d times for call %s (duration %s), %d unknown effects approved\n%s", chaosMCP, n, id, d, allowed-1,
				chaosLogs(c.mcpTasks[id], nil, workers))
		}
	}
	c.mu.Unlock()
	// No model request repeated for a stored step: a request for a step
	// made after an earlier request's answer for it was stored (seen in a
	// stored revision, or in the last one). A request made again because
	// the first answer was not stored (its replica died in the request) is
	// counted apart.
	reqs := model.requests()
	for _, h := range histories {
		seen.add(h, time.Time{})
	}
	repeated, again := chaosRepeated(reqs, seen.snapshot())
	if seen.errs > 0 {
		t.Logf("the watch of the stored conversations failed %d times (restarted)", seen.errs)
	}
	// No result lost: every call of a stored history answered once, and
	// every background or non-blocking call followed up.
	var lost, dup int
	for i, h := range histories {
		calls, answers := map[string]string{}, map[string]int{}
		var texts []string
		for _, m := range h {
			for _, p := range m.Parts {
				switch x := p.(type) {
				case message.ToolCall:
					calls[x.ToolCallID] = x.ToolName
				case message.ToolReturn:
					answers[x.ToolCallID]++
				case message.RetryPrompt:
					answers[x.ToolCallID]++
				case message.UserPrompt:
					for _, c := range x.Content {
						texts = append(texts, c.Text)
					}
				}
			}
		}
		if c.status(ctx, ids[i]) != "finished" {
			continue
		}
		if chaosPlans[i%len(chaosPlans)].kind == "mcp" && !slices.ContainsFunc(h, func(m message.Message) bool {
			return slices.ContainsFunc(m.Parts, func(p message.Part) bool {
				r, ok := p.(message.ToolReturn)
				return ok && r.ToolName == chaosMCP && strings.Contains(message.ContentText(r.Content), "Long running operation completed")
			})
		}) {
			lost++
			t.Logf("conversation %d: no result of %s", i, chaosMCP)
		}
		for id, name := range calls {
			switch n := answers[id]; {
			case n == 0:
				lost++
				t.Logf("conversation %d: call %s (%s) unanswered", i, id, name)
			case n > 1:
				dup += n - 1
			}
			if name == "bg" || name == "nb" {
				if !slices.ContainsFunc(texts, func(s string) bool { return strings.Contains(s, "'"+name+"' (task ") }) {
					lost++
					t.Logf("conversation %d: %s's follow-up missing", i, name)
				}
			}
		}
	}
	c.mu.Lock()
	unknown, approvals, mcpUnknown := len(c.unknown), len(c.decided), 0
	for _, a := range c.unknownCalls {
		mcpUnknown += len(a)
	}
	c.mu.Unlock()
	report := fmt.Sprintf("chaos: %d conversations (inline, background, approval, non-blocking, mcp: %d each), %d model requests, %d tasks approved, seed %d\n"+
		"chaos: faults for %v: %v SIGKILLs, one every %v; settled %v after\n"+
		"chaos: runs per tool %v; unknown effects surfaced to a person %d (of the MCP tool %d); idempotent idem run again with the same key %d\n"+
		"chaos: invariant 1, conversations neither finished nor waiting for a person: %d (finished %d, waiting %d)\n"+
		"chaos: invariant 2, runs of a tool not declared idempotent again for one attempt: %d\n"+
		"chaos: invariant 3, model requests repeated for a stored step: %d (asked again, no answer stored before the kill: %d)\n"+
		"chaos: invariant 4, results lost: %d (answered twice: %d)\n",
		convs, convs/len(chaosPlans), len(reqs), approvals, seed,
		faults, kills, killEvery, settled.Round(time.Second),
		runs, unknown, mcpUnknown, idemAgain,
		neither, finished, waiting, twice, repeated, again, lost, dup)
	fmt.Print(report)
	t.Log("\n" + report)
	if neither != 0 || twice != 0 || repeated != 0 || lost != 0 || dup != 0 {
		t.Errorf("an invariant of SPEC §20 broken")
	}
	if kills["nats-server"] == 0 || kills["agent serve replica"] == 0 || kills["toolworker"] == 0 {
		t.Errorf("kills %v: give CHAOS_FAULTS more time", kills)
	}
}

// chaosLogs returns the lines of every incarnation of procs that name
// the conversation or one of its pending tasks: what a broken invariant is
// explained by.
func chaosLogs(conv string, pending *deferred.PendingRecord, procs []*proctest.Process) string {
	names := []string{conv}
	if pending != nil {
		for _, t := range pending.Tasks {
			names = append(names, t.TaskID)
		}
	}
	var out []string
	for i, p := range procs {
		for _, l := range strings.Split(p.Logs(), "\n") {
			if slices.ContainsFunc(names, func(n string) bool { return strings.Contains(l, n) }) {
				out = append(out, fmt.Sprintf("[%d] %s", i, l))
			}
		}
	}
	return strings.Join(out, "\n")
}

// chaosRepeated counts the requests for a step made after an earlier
// answer for it was stored (repeated: SPEC §20 says never), and those made
// again while no earlier answer was stored (again).
func chaosRepeated(reqs []chaosRequest, stored map[string]time.Time) (repeated, again int) {
	type stepKey struct{ conv, step int }
	asked := map[stepKey][]chaosRequest{}
	for _, r := range reqs {
		k := stepKey{r.conv, r.step}
		before := asked[k]
		asked[k] = append(before, r)
		if len(before) == 0 {
			continue
		}
		isRepeat := false
		for _, e := range before {
			for _, id := range e.callIDs {
				if at, ok := stored[id]; ok && at.Before(r.at) {
					isRepeat = true
				}
			}
		}
		if isRepeat {
			repeated++
		} else {
			again++
		}
	}
	return repeated, again
}

// chaosSeen keeps when each tool call ID was first seen in a stored
// conversation.
type chaosSeen struct {
	mu   sync.Mutex
	at   map[string]time.Time
	errs int
}

// add records the call IDs of h as stored at (the zero time: at the end,
// before any request).
func (s *chaosSeen) add(h message.History, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range h {
		for _, tc := range m.ToolCalls() {
			if _, ok := s.at[tc.ToolCallID]; !ok {
				s.at[tc.ToolCallID] = at
			}
		}
	}
}

func (s *chaosSeen) snapshot() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.at)
}

// watch loads every conversation whose stored value changes, until ctx
// ends; the watch is opened again after the nats-server's restart.
func (s *chaosSeen) watch(ctx context.Context, js jetstream.JetStream, store *convstore.Store) {
	for ctx.Err() == nil {
		if err := s.watchOnce(ctx, js, store); err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.errs++
			s.mu.Unlock()
			time.Sleep(200 * time.Millisecond) // the server restarting: no signal in this process
		}
	}
}

func (s *chaosSeen) watchOnce(ctx context.Context, js jetstream.JetStream, store *convstore.Store) error {
	kv, err := js.KeyValue(ctx, natsjs.NamesFor("").ConversationsBucket)
	if err != nil {
		return err
	}
	w, err := kv.Watch(ctx, "conv.*", jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch ended")
			}
			if e == nil {
				continue // the current values were all delivered
			}
			at := time.Now()
			st, _, err := store.Load(ctx, strings.TrimPrefix(e.Key(), "conv."))
			if err != nil {
				continue
			}
			s.add(st.History, at)
		}
	}
}

// chaosClient is the person and the users of the chaos: it starts
// conversations and approves what waits, on whichever replica answers.
type chaosClient struct {
	urls []string
	nc   *nats.Conn

	mu      sync.Mutex
	ids     []string
	decided map[string]bool // the tasks decided
	unknown map[string]bool // the tasks seen as an unknown effect
	// unknownCalls are those of chaosMCP: by tool call ID, the start of
	// each attempt that became one (its worker's started_at); mcpTasks
	// are their task IDs.
	unknownCalls map[string]map[string]bool
	mcpTasks     map[string]string
	next         atomic.Int32
}

// do makes a request on one replica after the other until one answers.
func (c *chaosClient) do(ctx context.Context, method, path, token, body string) (int, map[string]any, error) {
	var last error
	for range 60 {
		url := c.urls[int(c.next.Add(1))%len(c.urls)]
		req, err := http.NewRequestWithContext(ctx, method, url+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			if ctx.Err() != nil {
				return 0, nil, ctx.Err()
			}
			time.Sleep(250 * time.Millisecond) // a replica restarting: no signal outside its process
			continue
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode >= 500 {
			last = fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
			time.Sleep(250 * time.Millisecond)
			continue
		}
		return resp.StatusCode, out, nil
	}
	return 0, nil, last
}

func (c *chaosClient) start(ctx context.Context, i int) (string, error) {
	code, out, err := c.do(ctx, "POST", "/v1/conversations", serveOperator, fmt.Sprintf(`{"agent":"ops","prompt":"chaos %d"}`, i))
	if err != nil {
		return "", err
	}
	id, _ := out["conversation_id"].(string)
	if code != 202 || id == "" {
		return "", fmt.Errorf("start %d: %d %v", i, code, out)
	}
	c.mu.Lock()
	c.ids = append(c.ids, id)
	c.mu.Unlock()
	return id, nil
}

func (c *chaosClient) view(ctx context.Context, id string) map[string]any {
	_, out, err := c.do(ctx, "GET", "/v1/conversations/"+id, serveViewer, "")
	if err != nil {
		return nil
	}
	return out
}

func (c *chaosClient) status(ctx context.Context, id string) string {
	s, _ := c.view(ctx, id)["status"].(string)
	return s
}

// decide approves every pending call of the conversations, once a
// second, until ctx ends (a decision published again is refused as a
// duplicate).
func (c *chaosClient) decide(ctx context.Context, ids func() []string) {
	for ctx.Err() == nil {
		for _, id := range ids() {
			v := c.view(ctx, id)
			pending, _ := v["pending"].([]any)
			for _, p := range pending {
				m, _ := p.(map[string]any)
				task, _ := m["task_id"].(string)
				if task == "" {
					continue
				}
				md, _ := m["metadata"].(map[string]any)
				c.mu.Lock()
				if md["offload.effect"] == "unknown" {
					c.unknown[task] = true
					if m["tool"] == chaosMCP {
						id, _ := m["tool_call_id"].(string)
						at, _ := md["started_at"].(string)
						if c.unknownCalls[id] == nil {
							c.unknownCalls[id] = map[string]bool{}
						}
						c.unknownCalls[id][at] = true
						c.mcpTasks[id] = task
					}
				}
				c.decided[task] = true
				c.mu.Unlock()
				_ = c.nc.Publish("tools.decision."+id+"."+task, []byte(`{"approved":true,"by":"chaos"}`))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func chaosInt(t *testing.T, name string, def int) int {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	return def
}

func chaosDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return d
	}
	return def
}
