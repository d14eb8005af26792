package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/internal/proctest"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The route password of the cluster tests (auth_test.go's TestMain sets
// the role passwords).
const routePassword = "test-password-of-route"

// TestClusterFailover (SPEC §5.6): on the 3-node cluster of
// deploy/nats/cluster/, agent provision --replicas 3 makes every stream
// R3; 500 tasks run over three toolworker processes connected to different
// nodes while the node leading the task stream, its consumer, the results
// and decisions streams and the conversation store is SIGKILLed: every
// task gets exactly one result, and a conversation paused before the kill
// (its pending call approved meanwhile) is claimed, loaded with the
// decision and saved after it; the node then restarts and catches up, and
// the agent binary runs a call with a URL list. It prints the failover
// figures.
func TestClusterFailover(t *testing.T) {
	agentBin, workerBin := binaries(t)
	natsServer := natstest.BuildNATSServer(t, t.TempDir())
	c := startCluster(t, natsServer)
	victim := 0
	names := natsjs.NamesFor("")

	// Provisioning as the admin, R3.
	out, err := exec.Command(agentBin, "provision", "--nats", c.list("admin", 1), "--replicas", "3", "--tools", "sleep").CombinedOutput()
	if err != nil {
		t.Fatalf("agent provision --replicas 3: %v\n%s", err, out)
	}
	adminNC := c.conn(t, "admin", 1)
	admin, err := jetstream.New(adminNC)
	if err != nil {
		t.Fatal(err)
	}
	streams, err := natsjs.StreamConfigs(natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		st, err := admin.Stream(t.Context(), s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if info := st.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("stream %s: replicas %d, cluster %+v; want R3", s.Name, info.Config.Replicas, info.Cluster)
		}
	}
	for stream, consumer := range map[string]string{names.Tasks: natsjs.TaskConsumerName("sleep")} {
		tc, err := admin.Consumer(t.Context(), stream, consumer)
		if err != nil {
			t.Fatal(err)
		}
		if info := tc.CachedInfo(); info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("consumer %s: cluster %+v; want 3 replicas like its stream", info.Name, info.Cluster)
		}
	}
	// A second provision without --replicas accepts them; with another
	// factor it is refused, naming both.
	if out, err := exec.Command(agentBin, "provision", "--nats", c.list("admin", 2)).CombinedOutput(); err != nil {
		t.Errorf("agent provision without --replicas on R3 streams: %v\n%s", err, out)
	}
	if out, err := exec.Command(agentBin, "provision", "--nats", c.list("admin", 2), "--replicas", "1").CombinedOutput(); err == nil || !strings.Contains(string(out), "num_replicas: want 1, have 3") {
		t.Errorf("agent provision --replicas 1 on R3 streams: %v\n%s", err, out)
	}

	// Every leader that matters on the victim, so that its death costs
	// elections.
	for _, s := range []string{names.Tasks, names.Results, names.Decisions, names.ConversationsStream, names.HistoriesStream} {
		moveLeader(t, adminNC, admin, s, "", c.nodes[victim].name)
	}
	moveLeader(t, adminNC, admin, names.Tasks, natsjs.TaskConsumerName("sleep"), c.nodes[victim].name)

	// A conversation paused before the kill: its history in the object
	// store (beyond MaxInline), its pending approval in the KV bucket.
	agentNC := c.conn(t, "agent", 2)
	agentJS, err := jetstream.New(agentNC)
	if err != nil {
		t.Fatal(err)
	}
	store, err := convstore.New(t.Context(), convstore.Config{
		JetStream: agentJS, Provision: natsjs.ProvisionOptions{Replicas: 3}, MaxInline: 1 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	paused := pausedConversation(40)
	if _, err := store.Save(t.Context(), paused, 0); err != nil {
		t.Fatal(err)
	}
	// A person approves the pending call while no agent runs.
	approver, err := jetstream.New(c.conn(t, "approver", 0))
	if err != nil {
		t.Fatal(err)
	}
	decisionSubj := "tools.decision." + paused.ID + "." + paused.Pending.Tasks[0].TaskID
	if _, err := approver.Publish(t.Context(), decisionSubj, []byte(`{"approved":true,"by":"alice"}`)); err != nil {
		t.Fatalf("approver decision: %v", err)
	}

	// An agent run paused before the kill: the model called an external
	// tool, which a person answers while no agent runs.
	agentDir := t.TempDir()
	spec := filepath.Join(agentDir, "agent.yaml")
	writeTestFile(t, spec, "external_tools:\n  - name: ask_human\n    description: Ask a person.\n    parameters: {type: object, properties: {question: {type: string}}}\n")
	runScript := filepath.Join(agentDir, "run.yaml")
	writeTestFile(t, runScript, "turns:\n  - tool_calls: [{tool: ask_human, args: {question: \"Which node survives?\"}}]\n")
	resumeScript := filepath.Join(agentDir, "resume.yaml")
	writeTestFile(t, resumeScript, "turns:\n  - text: resumed after the failover\n")
	runOut, pauseErr := exec.Command(agentBin, "run", "--nats", c.list("agent", victim), "--inbox-prefix", inboxPrefix("agent"), "--replicas", "3", "--spec", spec,
		"--model", "script:"+runScript, "--json", "ask").Output()
	var ee *exec.ExitError
	if !errors.As(pauseErr, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("agent run: %v (want exit 3)\n%s\n%s", pauseErr, runOut, ee.Stderr)
	}
	agentFinal := lastJSONLine(t, runOut)
	agentConv := agentFinal["conversation_id"].(string)
	agentTask := agentFinal["pending"].([]any)[0].(map[string]any)["task_id"].(string)
	answerer, err := jetstream.New(c.conn(t, "answerer", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := answerer.Publish(t.Context(), "tools.answer."+agentConv+"."+agentTask, []byte(`{"content":"node 2"}`)); err != nil {
		t.Fatalf("answerer: %v", err)
	}

	// Three workers: those of nodes 1 and 3 have only their node's URL
	// (they fail over to the servers the cluster announces), the second a
	// list of the three.
	workers := make([]*proctest.Process, 3)
	for i := range workers {
		url := c.list("worker_sleep", i)
		if i != 1 {
			url = strings.Replace(c.nodes[i].url, "nats://", "nats://worker_sleep:"+password("worker_sleep")+"@", 1)
		}
		workers[i] = proctest.StartProcess(t, workerBin, "--nats", url, "--inbox-prefix", inboxPrefix("worker_sleep"), "--tools", "sleep", "--id", "cluster-"+strconv.Itoa(i),
			"--concurrency", "4", "--replicas", "3", "-v")
	}
	onNode := map[string]bool{}
	for i, w := range workers {
		var started struct{ NATS string }
		if err := json.Unmarshal([]byte(w.WaitLog(t, `"msg":"toolworker started"`, time.Minute)), &started); err != nil {
			t.Fatal(err)
		}
		t.Logf("worker %d on %s", i, started.NATS)
		onNode[started.NATS[strings.LastIndex(started.NATS, ":")+1:]] = true
	}
	victimPort := c.nodes[victim].url[strings.LastIndex(c.nodes[victim].url, ":")+1:]
	if len(onNode) < 2 || !onNode[victimPort] {
		t.Fatalf("workers on the client ports %v, want at least two nodes, the victim's (%s) among them", onNode, victimPort)
	}

	// The agent side: a dispatcher on the agent's connection (its list
	// starts at node 2), 500 tasks at once.
	d, err := remote.NewDispatcher(remote.DispatcherConfig{Conn: agentNC, Replicas: 3, ServerLostAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = d.Stop(sctx)
	})
	const tasks = 500
	conv := protocol.NewID()
	rnd := rand.New(rand.NewPCG(7, 11)) //nolint:gosec // G404: a seeded, repeatable choice of tasks, not a secret
	handles := make([]*remote.Handle, 0, tasks)
	began := time.Now()
	for range tasks {
		args, _ := json.Marshal(map[string]any{"seconds": 0.02 + 0.08*rnd.Float64()})
		h, err := d.Dispatch(ctx, protocol.Task{TaskID: protocol.NewID(), Tool: "sleep", Args: args, ConversationID: conv})
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
	}
	type done struct {
		res protocol.Result
		err error
		at  time.Time
	}
	var mu sync.Mutex
	results := make(map[string]done, tasks)
	finished := make(chan struct{}, tasks)
	for _, h := range handles {
		go func() {
			res, err := h.Wait(ctx)
			mu.Lock()
			results[h.Task().TaskID] = done{res, err, time.Now()}
			mu.Unlock()
			finished <- struct{}{}
		}()
	}
	// The kill, once a third of the results are in. The admin's
	// connection is on node 2, which survives.
	elected := make(chan time.Duration, 1)
	var killedAt time.Time
	before := 0
	for n := range tasks {
		select {
		case <-finished:
		case <-ctx.Done():
			mu.Lock()
			got := len(results)
			mu.Unlock()
			t.Fatalf("%d of %d results after %v (killed at %v)\nworkers:\n%s\n%s\n%s", got, tasks, time.Since(began), killedAt.Sub(began), workers[0].Logs(), workers[1].Logs(), workers[2].Logs())
		}
		if n+1 == tasks/3 {
			before = n + 1
			killedAt = time.Now()
			c.nodes[victim].Kill()
			go func() { elected <- awaitNewLeader(ctx, admin, names.Tasks, c.nodes[victim].name) }()
		}
	}
	allIn := time.Since(killedAt)
	var election time.Duration
	select {
	case election = <-elected:
	case <-ctx.Done():
		t.Fatal("no new leader of the task stream")
	}

	// Figures: the longest time without a result after the kill, the
	// new leaders.
	statuses := map[protocol.Status]int{}
	after := []time.Time{killedAt}
	for _, r := range results {
		if r.err != nil {
			t.Errorf("a call failed: %v", r.err)
			continue
		}
		statuses[r.res.Status]++
		if r.at.After(killedAt) {
			after = append(after, r.at)
		}
	}
	slices.SortFunc(after, func(a, b time.Time) int { return a.Compare(b) })
	var stall time.Duration
	for i := 1; i < len(after); i++ {
		stall = max(stall, after[i].Sub(after[i-1]))
	}
	// Every stream is led by a survivor again (each replica group elects
	// on its own; a write to a group still electing gets no response).
	survivorJS := c.js(t, "admin", 1)
	leaders := map[string]string{}
	for _, s := range streams {
		awaitNewLeader(ctx, survivorJS, s.Name, c.nodes[victim].name)
		l, current, err := streamLeader(ctx, survivorJS, s.Name)
		if err != nil || l == "" || l == c.nodes[victim].name || current < 1 {
			t.Errorf("stream %s after the kill: leader %q, %d current replicas (%v)", s.Name, l, current, err)
		}
		leaders[s.Name] = l
	}
	allLed := time.Since(killedAt)

	// Stored results: exactly one per task.
	stored, dup := storedResults(t, survivorJS, names.Results, conv)
	executions := 0
	for _, w := range workers {
		executions += strings.Count(w.Logs(), `"msg":"task started"`)
	}

	// The paused conversation resumes on the surviving nodes: claimed,
	// loaded as saved, saved again.
	resumeAt := time.Now()
	lease, err := store.Claim(ctx, paused.ID, "cluster-test")
	if err != nil {
		t.Fatalf("claim after the kill: %v", err)
	}
	got, rev, err := store.Load(ctx, paused.ID)
	if err != nil {
		t.Fatalf("load after the kill: %v", err)
	}
	if len(got.History) != len(paused.History) || got.Pending == nil || got.Pending.Tasks[0].TaskID != paused.Pending.Tasks[0].TaskID {
		t.Fatalf("after the kill the conversation has %d messages and pending %+v; saved %d and %+v", len(got.History), got.Pending, len(paused.History), paused.Pending)
	}
	decisions, err := agentJS.Stream(ctx, names.Decisions)
	if err != nil {
		t.Fatal(err)
	}
	var decision *jetstream.RawStreamMsg
	err = retryNoResponders(ctx, func() (err error) {
		decision, err = decisions.GetLastMsgForSubject(ctx, decisionSubj)
		return err
	})
	if err != nil || !strings.Contains(string(decision.Data), `"by":"alice"`) {
		t.Fatalf("the decision published before the kill: %v", err)
	}
	got.History = append(got.History, message.NewRequest(message.UserText("resumed after the node died")))
	got.Pending = nil
	if _, err := store.Save(ctx, got, rev); err != nil {
		t.Fatalf("save after the kill: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
	resumed := time.Since(resumeAt)

	// The agent run paused before the kill resumes in a new process on the
	// surviving nodes, with the answer published before the kill.
	agentResumeAt := time.Now()
	resumeOut, err := exec.Command(agentBin, "resume", "--nats", c.list("agent", (victim+1)%3), "--inbox-prefix", inboxPrefix("agent"), "--spec", spec,
		"--model", "script:"+resumeScript, "--json", "--conversation", agentConv).Output()
	if err != nil {
		t.Fatalf("agent resume after the kill: %v\n%s", err, resumeOut)
	}
	if final := lastJSONLine(t, resumeOut); final["status"] != "finished" || final["output"] != "resumed after the failover" {
		t.Fatalf("agent resume after the kill: final %v", final)
	}
	histOut, err := exec.Command(agentBin, "history", "--nats", c.list("agent", (victim+1)%3), "--inbox-prefix", inboxPrefix("agent"), "--conversation", agentConv).Output()
	if err != nil || !strings.Contains(string(histOut), "node 2") {
		t.Fatalf("agent history after the resume (the answer must be in it): %v\n%s", err, histOut)
	}
	agentResumed := time.Since(agentResumeAt)

	// The killed node comes back on its store and catches up.
	restartAt := time.Now()
	c.nodes[victim].Restart(t)
	c.nodes[victim].WaitLog(t, "Server is ready", time.Minute)
	// No signal reaches a client for a follower catching up: polled.
	deadline, _ := ctx.Deadline()
	offloadtest.EventuallyWithin(t, time.Until(deadline), fmt.Sprintf("node %s to catch up (%s with 2 current followers again)", c.nodes[victim].name, names.Results), func() error {
		_, current, err := streamLeader(ctx, survivorJS, names.Results)
		if err == nil && current != 2 {
			err = fmt.Errorf("%d current followers", current)
		}
		return err
	})
	caughtUp := time.Since(restartAt)

	// The agent binary on the cluster: a URL list, R3 checked, a call
	// served by the workers.
	run := exec.CommandContext(ctx, agentBin, "run", "--nats", c.list("agent", 0), "--inbox-prefix", inboxPrefix("agent"), "--replicas", "3", "--model", "test", "--tools", "sleep", "--json", "nap")
	run.Dir = t.TempDir()
	var runErr strings.Builder
	run.Stderr = &runErr
	stdout, err := run.Output()
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	if err != nil || !strings.Contains(lines[len(lines)-1], `"status":"finished"`) || !strings.Contains(string(stdout), `"tool_result"`) {
		t.Errorf("agent run on the cluster: %v\n%s\n%s", err, stdout, runErr.String())
	}

	report := fmt.Sprintf("cluster failover: 3 nats-server nodes, R3 streams, 3 toolworkers (concurrency 4) on different nodes, %d tasks of 20-100 ms\n"+
		"cluster failover: node %s (leader of %s, its consumer, %s, %s, %s) SIGKILLed after %d results, %v after the first dispatch\n"+
		"cluster failover: results %d (statuses %v), stored %d, duplicated %d; tool runs %d (at-least-once: %d re-run)\n"+
		"cluster failover: new leader of %s reported by the JetStream API %v after the kill, every stream led by a survivor when checked %v after (all results in); longest time without a result after the kill %v; all results %v after the kill; new leaders %v\n"+
		"cluster failover: paused conversation (its decision published before the kill) read, claimed, loaded and saved after the kill in %v\n"+
		"cluster failover: agent run paused before the kill (external call answered before it) resumed by agent resume after the kill in %v\n"+
		"cluster failover: node %s restarted on its store, %s current on all 3 nodes %v after the restart\n",
		tasks, c.nodes[victim].name, names.Tasks, names.Results, names.Decisions, names.ConversationsStream, before, killedAt.Sub(began).Round(time.Millisecond),
		len(results), statuses, stored, dup, executions, executions-tasks,
		names.Tasks, election.Round(time.Millisecond), allLed.Round(time.Millisecond), stall.Round(time.Millisecond), allIn.Round(time.Millisecond), leaders,
		resumed.Round(time.Millisecond), agentResumed.Round(time.Millisecond),
		c.nodes[victim].name, names.Results, caughtUp.Round(time.Millisecond))
	t.Log("\n" + report)
	if testing.Verbose() {
		fmt.Print(report) //nolint:forbidigo // make test/cluster prints the figures as they are, without t.Log's indent
	}
	if len(results) != tasks || statuses[protocol.StatusOK] != tasks {
		t.Errorf("%d results, statuses %v; want %d ok", len(results), statuses, tasks)
	}
	if stored != tasks || dup != 0 {
		t.Errorf("stored results: %d tasks, %d duplicated; want %d and 0", stored, dup, tasks)
	}
}

// pausedConversation is the state a run leaves when it pauses on an
// approval, with n messages of history.
func pausedConversation(n int) *conversation.State {
	id := protocol.NewID()
	st := &conversation.State{ID: id, Pending: &deferred.PendingRecord{ConversationID: id, RunID: protocol.NewID(), Tasks: []deferred.PendingTask{
		{TaskID: protocol.NewID(), Kind: "approval", Tool: "shell", ToolCallID: "call_1", Args: []byte(`{"cmd":"ls"}`)},
	}}}
	for i := range n {
		st.History = append(st.History, message.NewRequest(message.UserText(strings.Repeat("history ", 20)+strconv.Itoa(i))))
	}
	return st
}

// storedResults reads the results stream of conv: the number of tasks with
// a stored result, and how many stored results are beyond the first of
// their task.
func storedResults(t *testing.T, js jetstream.JetStream, stream, conv string) (tasks, dup int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := retryNoResponders(ctx, func() (err error) {
		tasks, dup, err = storedResultsOnce(ctx, js, stream, conv)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return tasks, dup
}

func storedResultsOnce(ctx context.Context, js jetstream.JetStream, stream, conv string) (tasks, dup int, err error) {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tools.result." + conv + ".>"}})
	if err != nil {
		return 0, 0, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("tools.result."+conv+".>"))
	if err != nil {
		return 0, 0, err
	}
	total := 0
	for _, n := range info.State.Subjects {
		total += int(n) //nolint:gosec // G115: a stream's message count in a test, far below MaxInt
	}
	per := map[string]int{}
	for read := 0; read < total; {
		batch, err := cons.Fetch(total-read, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return 0, 0, err
		}
		n := 0
		for m := range batch.Messages() {
			per[m.Subject()]++
			n++
		}
		if err := batch.Error(); err != nil {
			return 0, 0, fmt.Errorf("read %d of %d results: %w", read, total, err)
		}
		if n == 0 {
			return 0, 0, fmt.Errorf("read %d of %d results: no more", read, total)
		}
		read += n
	}
	for _, n := range per {
		dup += n - 1
	}
	return len(per), dup, nil
}

// retryNoResponders runs op again while it fails for want of a responder:
// right after a failover, a stream's new leader or a consumer just made
// on another node is not reachable for a moment, and no signal says when
// it is.
func retryNoResponders(ctx context.Context, op func() error) error {
	for {
		err := op()
		if err == nil || !(errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse)) {
			return err
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}

// TestClusterConfigs: the three node configurations of deploy/nats/cluster/
// parse with nats-server's own parser; each includes auth.conf, listens on
// loopback on the ports cluster.sh prints, has its own name and store, and
// authenticates its routes; without the route password none loads.
func TestClusterConfigs(t *testing.T) {
	t.Setenv("OFFLOAD_ROUTE_PASSWORD", routePassword)
	t.Setenv("OFFLOAD_NATS_ROUTES", "[nats-route://route:"+routePassword+"@127.0.0.1:6222, nats-route://route:"+routePassword+"@127.0.0.1:6223, nats-route://route:"+routePassword+"@127.0.0.1:6224]")
	script, err := os.ReadFile("nats/cluster/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", "nats/cluster/cluster.sh").CombinedOutput(); err != nil {
		t.Fatalf("cluster.sh: %v\n%s", err, out)
	}
	names, stores := map[string]bool{}, map[string]bool{}
	for i := 1; i <= 3; i++ {
		path := fmt.Sprintf("nats/cluster/node%d.conf", i)
		o, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if o.Host != "127.0.0.1" || o.Port != 4221+i || o.HTTPHost != "127.0.0.1" || o.HTTPPort != 8221+i ||
			o.Cluster.Host != "127.0.0.1" || o.Cluster.Port != 6221+i || o.Cluster.Name != "offload" {
			t.Errorf("%s: client %s:%d, http %s:%d, routes %s:%d in %q; want loopback %d, %d, %d in offload",
				path, o.Host, o.Port, o.HTTPHost, o.HTTPPort, o.Cluster.Host, o.Cluster.Port, o.Cluster.Name, 4221+i, 8221+i, 6221+i)
		}
		if !o.JetStream || o.MaxPayload != 1<<20 || o.ServerName == "" || names[o.ServerName] || o.StoreDir == "" || stores[o.StoreDir] {
			t.Errorf("%s: jetstream %v, max_payload %d, name %q, store %q (names and stores must differ)", path, o.JetStream, o.MaxPayload, o.ServerName, o.StoreDir)
		}
		names[o.ServerName], stores[o.StoreDir] = true, true
		if len(o.Users) != len(roles) {
			t.Errorf("%s: %d users, want the %d roles of auth.conf", path, len(o.Users), len(roles))
		}
		if o.Cluster.Username != "route" || o.Cluster.Password != routePassword || len(o.Routes) != 3 {
			t.Errorf("%s: route user %q password %q, %d routes; want route with $OFFLOAD_ROUTE_PASSWORD and the 3 of $OFFLOAD_NATS_ROUTES", path, o.Cluster.Username, o.Cluster.Password, len(o.Routes))
		}
	}
	// cluster.sh starts node$n.conf for n in 1..3 and computes the same
	// ports.
	for _, want := range []string{`nodes=(1 2 3)`, `"$here/node$n.conf"`, `6221 + n`, `4221 + n`} {
		if !strings.Contains(string(script), want) {
			t.Errorf("cluster.sh lacks %s", want)
		}
	}
	os.Unsetenv("OFFLOAD_ROUTE_PASSWORD")
	if _, err := server.ProcessConfigFile("nats/cluster/node1.conf"); err == nil || !strings.Contains(err.Error(), "OFFLOAD_ROUTE_PASSWORD") {
		t.Errorf("without OFFLOAD_ROUTE_PASSWORD: %v", err)
	}
}

// writeTestFile writes a file the test's binaries read.
func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// lastJSONLine decodes the last line of --json output: the final event.
func lastJSONLine(t *testing.T, out []byte) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var ev map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ev); err != nil {
		t.Fatalf("last --json line %q: %v", lines[len(lines)-1], err)
	}
	return ev
}
