package conversation_test

import (
	"slices"
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// What keeps a conversation from being continued: every unanswered call
// while one blocks; non-blocking calls only until one outcome arrived for
// one of them or a background task is pending.
func TestWaiting(t *testing.T) {
	t.Parallel()
	approval := deferred.PendingTask{TaskID: "A", Kind: deferred.KindApproval}
	nb1 := deferred.PendingTask{TaskID: "N1", Kind: deferred.KindApproval, NonBlocking: true}
	nb2 := deferred.PendingTask{TaskID: "N2", Kind: deferred.KindExternal, NonBlocking: true}
	bg := deferred.PendingTask{TaskID: "B", Kind: deferred.KindBackground}
	cases := []struct {
		name    string
		tasks   []deferred.PendingTask
		arrived []string
		want    []string
	}{
		{"blocking unanswered", []deferred.PendingTask{approval, nb1}, []string{"N1"}, []string{"A"}},
		{"blocking answered", []deferred.PendingTask{approval}, []string{"A"}, nil},
		{"non-blocking, none arrived", []deferred.PendingTask{nb1, nb2}, nil, []string{"N1", "N2"}},
		{"non-blocking, one arrived", []deferred.PendingTask{nb1, nb2}, []string{"N2"}, nil},
		{"non-blocking with a background task", []deferred.PendingTask{nb1, bg}, nil, nil},
		{"blocking and non-blocking unanswered", []deferred.PendingTask{approval, nb1}, nil, []string{"A", "N1"}},
	}
	for _, c := range cases {
		st := &conversation.State{ID: "C", Pending: &deferred.PendingRecord{Tasks: c.tasks}}
		for _, id := range c.arrived {
			st.Arrivals = append(st.Arrivals, conversation.Arrival{TaskID: id, Kind: conversation.ArrivalDecision})
		}
		var got []string
		for _, w := range st.Waiting() {
			got = append(got, w.TaskID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: waiting %v, want %v", c.name, got, c.want)
		}
	}
}
