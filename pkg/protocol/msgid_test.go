package protocol

import "testing"

func TestMsgIDs(t *testing.T) {
	t.Parallel()
	for got, want := range map[string]string{
		TaskMsgID("T", 0):       "T",
		TaskMsgID("T", 2):       "T:2",
		ResultMsgID("T", 0):     "res:T:0",
		ResultMsgID("T", 3):     "res:T:3",
		ApprovalMsgID("T"):      "approval:T",
		ResolutionMsgID("T"):    "resolved:T",
		DecisionMsgID("C", "T"): "decision.C.T",
		AnswerMsgID("C", "T"):   "answer.C.T",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
