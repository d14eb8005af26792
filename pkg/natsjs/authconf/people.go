package authconf

import (
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// pendingReader returns what reading the pending records takes (read-only:
// the bucket's info, watches and gets; the index of pending calls' info
// and its pages, batched direct gets), and no other bucket: people read
// pending records, not histories (SPEC §9).
func pendingReader(n natsjs.Names) []string {
	s := n.PendingStream
	return []string{
		"$JS.API.STREAM.INFO." + s,
		"$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>",
		"$JS.API.CONSUMER.CREATE." + s + ".>", "$JS.API.CONSUMER.INFO." + s + ".>",
		"$JS.API.CONSUMER.DELETE." + s + ".>", "$JS.API.CONSUMER.MSG.NEXT." + s + ".>",
		"$JS.FC." + s + ".>",
		"$JS.API.STREAM.INFO." + n.PendingIndex, "$JS.API.DIRECT.GET." + n.PendingIndex,
	}
}

// settledLookups returns the direct gets by subject with which a person's
// command sees whether a task already has its decision or answer.
func settledLookups(n natsjs.Names) []string {
	s := protocol.Subjects{Prefix: n.Prefix}
	return []string{
		"$JS.API.DIRECT.GET." + n.Decisions + "." + s.All(protocol.KindDecision),
		"$JS.API.DIRECT.GET." + n.Answers + "." + s.All(protocol.KindAnswer),
	}
}

// Approver returns the permissions of the approver role for prefix (""
// means [protocol.DefaultPrefix]): it publishes decisions, reads the
// pending records and the approvals announced, and nothing of any
// conversation's state or history.
func Approver(prefix string) Permissions {
	n := natsjs.NamesFor(prefix)
	s := protocol.Subjects{Prefix: n.Prefix}
	return Permissions{
		Publish: []Rule{
			{"", []string{s.All(protocol.KindDecision)}},
			{"the pending records (read-only)", pendingReader(n)},
			{"a task's decision or answer, if stored (direct get by subject)", settledLookups(n)},
			{"the approvals announced (what a live run with --approve wait waits for)",
				append([]string{"$JS.API.STREAM.INFO." + n.Approvals}, reader(n.Approvals)...)},
		},
		Subscribe: []Rule{{"", []string{s.All(protocol.KindApproval), InboxPrefix("approver") + ".>"}}},
	}
}

// Answerer returns the permissions of the answerer role for prefix (""
// means [protocol.DefaultPrefix]): it publishes answers to external calls,
// reads the pending records and looks the approvals announced up, and
// nothing of any conversation's state or history. It cannot forge a
// worker's result: workers alone publish results.
func Answerer(prefix string) Permissions {
	n := natsjs.NamesFor(prefix)
	s := protocol.Subjects{Prefix: n.Prefix}
	return Permissions{
		Publish: []Rule{
			{"", []string{s.All(protocol.KindAnswer)}},
			{"the pending records (read-only)", pendingReader(n)},
			{"a task's decision or answer, if stored (direct get by subject)", settledLookups(n)},
			{"the approvals announced, looked up (listed by agent pending: the\n approval calls the pending records show anyway)", []string{
				"$JS.API.STREAM.INFO." + n.Approvals,
				"$JS.API.DIRECT.GET." + n.Approvals, "$JS.API.DIRECT.GET." + n.Approvals + ".>",
			}},
		},
		Subscribe: []Rule{{"", []string{InboxPrefix("answerer") + ".>"}}},
	}
}
