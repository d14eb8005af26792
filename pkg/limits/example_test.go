package limits_test

import (
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
)

// The limits of a tool's worker and of an agent combine for a call, the
// stricter winning; the tool's shared state then decides whether the call
// starts now or waits, and why.
func ExampleCombine() {
	tool := &limits.Limits{MaxInFlight: 2, Key: limits.KeyTenant, Rate: &limits.Rate{Limit: 60, Period: limits.Duration(time.Minute)}}
	agent := &limits.Limits{MaxInFlight: 1, Key: limits.KeyTenant, Priority: 5}
	call := limits.Call{Tenant: "acme", Args: []byte(`{}`)}
	plan := limits.Combine(call, tool, agent)
	fmt.Printf("%+v priority %d\n", plan.Holds, plan.Priority)

	var st limits.State
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	fmt.Printf("first: %q\n", st.Admit(plan, "t1:0", "w1", now, 30*time.Second))
	fmt.Printf("second: %q\n", st.Admit(plan, "t2:0", "w1", now, 30*time.Second))
	st.Release("t1:0")
	fmt.Printf("a second later: %q\n", st.Admit(plan, "t2:0", "w1", now.Add(time.Second), 30*time.Second))
	// Output:
	// [{Bucket:tenant=acme Max:1 Every:1s Burst:1}] priority 5
	// first: ""
	// second: "max_in_flight"
	// a second later: ""
}
