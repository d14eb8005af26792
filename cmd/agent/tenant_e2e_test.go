package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/limits"
	"github.com/offload-dev/offload/pkg/natsjs/worker"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// tenantToken is an operator's token bound to tenant acme.
const tenantToken = "acme-op-token-4f1c9e27b0d3a85e"

// tenantJobs is a tool "job" limited to max_in_flight 2 per tenant that
// records, by the tenant its worker was given (the task's), how many of
// its calls run at once; each call waits for gate.
type tenantJobs struct {
	mu            sync.Mutex
	running, most map[string]int
	calls         map[string]int
	agents        map[string]int // calls by the agent their worker was given
	gate          chan struct{}
	gateOnce      sync.Once
}

func (j *tenantJobs) open() { j.gateOnce.Do(func() { close(j.gate) }) }

func (j *tenantJobs) tool() *tool.Tool {
	t := tool.Func("job", "A job limited per tenant.", func(ctx context.Context, rc *tool.RunContext, _ noArgs) (string, error) {
		j.mu.Lock()
		j.running[rc.Tenant]++
		j.calls[rc.Tenant]++
		j.agents[rc.Agent]++
		j.most[rc.Tenant] = max(j.most[rc.Tenant], j.running[rc.Tenant])
		j.mu.Unlock()
		defer func() {
			j.mu.Lock()
			j.running[rc.Tenant]--
			j.mu.Unlock()
		}()
		select {
		case <-j.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "done for " + rc.Tenant, nil
	})
	t.Limits = &limits.Limits{MaxInFlight: 2, Key: "tenant"}
	return t
}

func (j *tenantJobs) snapshot() (running, most, calls map[string]int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		out := map[string]int{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return cp(j.running), cp(j.most), cp(j.calls)
}

// Tenants from the agent side reach the workers' per-tenant limits (SPEC
// §19, issue 42): two agent serve replicas start 16 conversations of two
// tenants over the API — acme's with a token bound to it, globex's naming
// it in the request — each calling job, which three worker replicas serve
// with max_in_flight 2 keyed by tenant. The tasks carry each
// conversation's tenant (field and header): two calls of each tenant run
// at once (were the tenant lost, one key would hold all four to two),
// never more, and every conversation finishes with its own tenant's
// result. A conversation started naming none has the spec's tenant; agent
// run --tenant carries its tenant the same way. agent serve's tasks carry
// their agent's name too (keys by agent).
func TestTenantsReachWorkerLimits(t *testing.T) {
	w := newServeWorld(t)
	if err := os.WriteFile(w.spec, []byte("name: ops\nmodel: openai:fake-model\ntools: [job]\ntenant: hooli\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.tokens, []byte(serveOperator+" operator ops\n"+tenantToken+" operator acmeops tenant=acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobs := &tenantJobs{running: map[string]int{}, most: map[string]int{}, calls: map[string]int{}, agents: map[string]int{},
		gate: make(chan struct{})}
	defer jobs.open()
	for i := range 3 {
		wk, err := worker.New(worker.Config{Conn: w.nats.Conn(t), ID: fmt.Sprint("tenant-worker-", i), Tools: []*tool.Tool{jobs.tool()}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err = wk.Start(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			jobs.open()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = wk.StopAndCancel(ctx)
		})
	}
	tasks := make(chan string, 64) // the tenant header of each job task published
	sub, err := w.nats.Conn(t).Subscribe(protocol.DefaultPrefix+".task.job", func(m *nats.Msg) { tasks <- m.Header.Get(protocol.TenantHeader) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	_, url1 := w.replica(t)
	_, url2 := w.replica(t)

	const perTenant = 8
	type outcome struct {
		tenant string
		code   int
		final  map[string]any
		err    error
	}
	outcomes := make(chan outcome, 2*perTenant)
	var wg sync.WaitGroup
	for i := range perTenant {
		url := []string{url1, url2}[i%2]
		const prompt = `"[{\"tool\":\"job\",\"args\":{}}]"`
		wg.Go(func() {
			code, final, err := postJSON(t.Context(), url+"/v1/conversations?wait=1", tenantToken, `{"agent":"ops","prompt":`+prompt+`}`)
			outcomes <- outcome{"acme", code, final, err}
		})
		wg.Go(func() {
			code, final, err := postJSON(t.Context(), url+"/v1/conversations?wait=1", serveOperator, `{"agent":"ops","tenant":"globex","prompt":`+prompt+`}`)
			outcomes <- outcome{"globex", code, final, err}
		})
	}
	offloadtest.Eventually(t, "two calls of each tenant running", func() bool {
		running, _, _ := jobs.snapshot()
		return running["acme"] == 2 && running["globex"] == 2
	})
	jobs.open()
	wg.Wait()
	close(outcomes)
	for o := range outcomes {
		out, _ := o.final["output"].(string)
		if o.err != nil || o.code != 200 || o.final["status"] != "finished" || out != "seen job:done for "+o.tenant {
			t.Errorf("a conversation of %s: %d %v %v", o.tenant, o.code, o.final, o.err)
		}
	}
	_, most, calls := jobs.snapshot()
	for _, tenant := range []string{"acme", "globex"} {
		if most[tenant] != 2 {
			t.Errorf("tenant %s had at most %d calls running at once, want 2 (max_in_flight 2 per tenant)", tenant, most[tenant])
		}
		if calls[tenant] != perTenant {
			t.Errorf("tenant %s: %d calls ran, want %d", tenant, calls[tenant], perTenant)
		}
	}
	if len(calls) != 2 {
		t.Errorf("calls by tenant %v, want acme's and globex's only", calls)
	}

	// Neither the request nor the token names one: the spec's.
	code, final := api(t, "POST", url1+"/v1/conversations?wait=1", serveOperator, `{"agent":"ops","prompt":"[{\"tool\":\"job\",\"args\":{}}]"}`)
	if out, _ := final["output"].(string); code != 200 || out != "seen job:done for hooli" {
		t.Errorf("a conversation of the spec's tenant: %d %v", code, final)
	}

	// agent run --tenant: the same tenant on its task.
	r := w.agent("run", "--tenant", "initech", "--tools", "job", `[{"tool":"job","args":{}}]`)
	if out, _ := r.final["output"].(string); r.code != 0 || out != "seen job:done for initech" {
		t.Errorf("agent run --tenant initech: %d %v\n%s", r.code, r.final, r.stderr)
	}
	if st := w.state(r.conv()); st.Tenant != "initech" {
		t.Errorf("agent run --tenant initech stored tenant %q", st.Tenant)
	}
	headers := map[string]int{}
	for range 2*perTenant + 2 {
		headers[offloadtest.WaitOrTimeout(t, tasks, "a job task")]++
	}
	if headers["acme"] != perTenant || headers["globex"] != perTenant || headers["hooli"] != 1 || headers["initech"] != 1 || len(headers) != 4 {
		t.Errorf("the tasks' %s headers: %v", protocol.TenantHeader, headers)
	}
	jobs.mu.Lock()
	if jobs.agents["ops"] != 2*perTenant+1 || jobs.agents[""] != 1 {
		t.Errorf("calls by agent %v, want agent serve's %d of ops and agent run's one of none", jobs.agents, 2*perTenant+1)
	}
	jobs.mu.Unlock()
	bad := w.command("run", "--tenant", "no tenant", "--tools", "job", "hi")
	out, err := bad.CombinedOutput()
	if code := exitCode(t, err); code != 2 || !strings.Contains(string(out), "--tenant") {
		t.Errorf("agent run --tenant 'no tenant': exit %d, want 2 (usage)\n%s", code, out)
	}
}

// postJSON posts body to url with token and decodes the JSON answer
// (safe off the test's goroutine: it fails nothing itself).
func postJSON(ctx context.Context, url, token, body string) (int, map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, out, nil
}
