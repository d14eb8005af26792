package serve

import (
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// complete, the wake's one predicate: no blocking call (approval,
// external) without its message, and something arrived; any background
// outcome does, once nothing blocks.
func TestComplete(t *testing.T) {
	approval := deferred.PendingTask{TaskID: "a", Kind: deferred.KindApproval}
	external := deferred.PendingTask{TaskID: "e", Kind: deferred.KindExternal}
	bg := deferred.PendingTask{TaskID: "b", Kind: deferred.KindBackground}
	bg2 := deferred.PendingTask{TaskID: "c", Kind: deferred.KindBackground}
	nb := deferred.PendingTask{TaskID: "n", Kind: deferred.KindApproval, NonBlocking: true}
	nb2 := deferred.PendingTask{TaskID: "m", Kind: deferred.KindExternal, NonBlocking: true}
	for _, tc := range []struct {
		name    string
		tasks   []deferred.PendingTask
		arrived []string
		want    bool
	}{
		{"an approval decided", []deferred.PendingTask{approval}, []string{"a"}, true},
		{"an approval waiting", []deferred.PendingTask{approval}, nil, false},
		{"one of two blocking calls answered", []deferred.PendingTask{approval, external}, []string{"e"}, false},
		{"both answered", []deferred.PendingTask{approval, external}, []string{"a", "e"}, true},
		{"a background outcome", []deferred.PendingTask{bg, bg2}, []string{"c"}, true},
		{"background tasks running on", []deferred.PendingTask{bg, bg2}, nil, false},
		{"a background outcome while an approval waits", []deferred.PendingTask{approval, bg}, []string{"b"}, false},
		{"an approval decided, a background task running on", []deferred.PendingTask{approval, bg}, []string{"a"}, true},
		{"one of two non-blocking calls decided", []deferred.PendingTask{nb, nb2}, []string{"n"}, true},
		{"non-blocking calls waiting", []deferred.PendingTask{nb, nb2}, nil, false},
		{"a non-blocking call decided while an approval waits", []deferred.PendingTask{approval, nb}, []string{"n"}, false},
	} {
		arrived := map[string]bool{}
		for _, id := range tc.arrived {
			arrived[id] = true
		}
		if got := complete(&conversation.Summary{Tasks: tc.tasks}, arrived); got != tc.want {
			t.Errorf("%s: complete = %v, want %v", tc.name, got, tc.want)
		}
	}
}
