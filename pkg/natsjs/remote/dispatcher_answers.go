package remote

import "github.com/offload-dev/offload/pkg/metrics"

// AwaitAnswers records the external calls of conversation conv that wait
// for an answer now (replacing those recorded for conv before; none: conv
// is forgotten). Only an answer, on <prefix>.answer.<conv>.<task>, settles
// an external call: a result on the results subject for one of these
// tasks, which a worker that knows the task's ID could publish, is refused
// as wrong_kind and counted, as the conversation store's reader refuses it
// on a resume (SPEC §5.2). The set is bounded by the calls pending in the
// conversations this process holds.
func (d *Dispatcher) AwaitAnswers(conv string, tasks []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for task, c := range d.answers {
		if c == conv {
			delete(d.answers, task)
		}
	}
	for _, task := range tasks {
		d.answers[task] = conv
	}
}

// answerOnlyLocked returns the reason to refuse a result for task in conv
// when the task is an external call waiting for an answer: "" when it is
// not one.
func (d *Dispatcher) answerOnlyLocked(task, conv string) (reason metrics.RefuseReason, note string) {
	owner, ok := d.answers[task]
	switch {
	case !ok:
		return "", ""
	case owner != conv:
		return metrics.RefuseWrongConversation, "the task belongs to another conversation"
	}
	return metrics.RefuseWrongKind, "the task is a pending external call: only an answer settles it, not a result"
}
