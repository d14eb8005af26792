package authconf

import (
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// Rule is a group of subjects with the reason they are allowed.
type Rule struct {
	// Comment says why the subjects are allowed (rendered as a comment).
	Comment string
	// Subjects are the subjects (with wildcards) allowed.
	Subjects []string
}

// Permissions are what a user may publish and subscribe to; everything
// else is denied.
type Permissions struct {
	// Publish are the subjects the user may publish on, JetStream API
	// requests included.
	Publish []Rule
	// Subscribe are the subjects the user may subscribe to.
	Subscribe []Rule
}

// PublishSubjects returns every subject of p.Publish, in order.
func (p Permissions) PublishSubjects() []string { return flat(p.Publish) }

// SubscribeSubjects returns every subject of p.Subscribe, in order.
func (p Permissions) SubscribeSubjects() []string { return flat(p.Subscribe) }

func flat(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.Subjects...)
	}
	return out
}

// InboxPrefix returns the inbox prefix of user, _INBOX_<user>: replies
// (JetStream API responses, publish acknowledgements, a pull consumer's
// deliveries) come to each user on its own prefix, so that no user reads
// another's (a worker of one tool would otherwise read the tasks delivered
// to another's).
func InboxPrefix(user string) string { return "_INBOX_" + user }

// streamInfos returns the info requests of every stream of the
// definitions: the binaries check at start-up that what they use exists.
func streamInfos(n natsjs.Names) []string {
	var out []string
	for _, s := range []string{n.Tasks, n.Results, n.Approvals, n.Decisions, n.Expiries, n.Cancel, n.Answers,
		n.RegistryStream, n.ConversationsStream, n.HistoriesStream, n.PendingStream, n.Wake, n.Events, n.EffectsStream, n.ServiceStream,
		n.LimitsStream, n.QueueStream, n.Dead, n.Audit, n.PendingIndex, n.StatusIndex} {
		out = append(out, "$JS.API.STREAM.INFO."+s)
	}
	return out
}

// reader returns what reading stream takes: ordered (pull) consumers,
// direct gets and message gets.
func reader(stream string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + stream + ".>", "$JS.API.CONSUMER.INFO." + stream + ".>",
		"$JS.API.CONSUMER.DELETE." + stream + ".>", "$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>", "$JS.API.STREAM.MSG.GET." + stream,
	}
}

// Agent returns the permissions of the agent role for prefix ("" means
// [protocol.DefaultPrefix]): it publishes tasks, approval announcements
// and cancels; reads results, answers, decisions, progress and the
// registry; reads and writes the conversation store; reads the public
// half of the service's decision key, which verifies the decisions
// agent serve signed (issue 37), and no other key of the service's
// bucket (its info, which names keys, only).
func Agent(prefix string) Permissions {
	n := natsjs.NamesFor(prefix)
	s := protocol.Subjects{Prefix: n.Prefix}
	return Permissions{
		Publish: append(agentRules(n, s), Rule{"the public half of the service's decision key (agent serve signs the\n decisions its faces publish; agents verify them), its key alone",
			[]string{"$JS.API.DIRECT.GET." + n.ServiceStream + ".$KV." + n.ServiceBucket + "." + natsjs.DecisionPublicKey}}),
		Subscribe: []Rule{{"", []string{s.All(protocol.KindProgress), InboxPrefix("agent") + ".>"}}},
	}
}

// Serve returns the permissions of the serve role (agent serve) for
// prefix ("" means [protocol.DefaultPrefix]): what its agents' runs need
// (the agent role's), its wake markers, run events and consumers, the
// decisions and answers it publishes on behalf of the people its faces
// authenticated (its inbox, API and signed links), and its own bucket:
// its decision key pair, its links' key and the links used (issue 37).
func Serve(prefix string) Permissions {
	n := natsjs.NamesFor(prefix)
	s := protocol.Subjects{Prefix: n.Prefix}
	return Permissions{
		Publish: append(agentRules(n, s),
			Rule{"agent serve: the wake consumers (durable wake on decisions, answers,\n results and wake markers) acknowledged; the wake markers and run\n events it publishes and reads; the notification consumer (durable\n notify on approvals, --notify) read and acknowledged", serveGrants(n, s)},
			Rule{"the decisions and answers it publishes on behalf of the people its\n inbox, API and signed links authenticated (the decisions signed with\n its key)", []string{s.All(protocol.KindDecision), s.All(protocol.KindAnswer)}},
			Rule{"its own bucket: the decision key pair, the links' key and the links\n used, made once across replicas", []string{"$KV." + n.ServiceBucket + ".>",
				"$JS.API.DIRECT.GET." + n.ServiceStream, "$JS.API.DIRECT.GET." + n.ServiceStream + ".>"}},
			Rule{"the operator's hands on the fleet's tools (SPEC §19, /v1/tools): the\n tools' fleet control states, read and written with compare-and-set (a\n pause, a resume, a cancel); the dead letters, read, counted and deleted\n once replayed or discarded; the audit record of each action (not the\n task consumers' info: the calls not delivered yet are counted for admin\n alone)", toolOperatorGrants(n, s)},
		),
		Subscribe: []Rule{{"", []string{s.All(protocol.KindProgress), InboxPrefix("serve") + ".>"}}},
	}
}

// toolOperatorGrants are what the operator's hands on the tools take
// (package toolctl), beside an agent's task and cancel subjects.
func toolOperatorGrants(n natsjs.Names, s protocol.Subjects) []string {
	out := append([]string{"$KV." + n.LimitsBucket + ".*.state", "$JS.FC." + n.LimitsStream + ".>"}, reader(n.LimitsStream)...)
	return append(out, "$JS.API.DIRECT.GET."+n.Dead, "$JS.API.STREAM.MSG.DELETE."+n.Dead, s.Prefix+".audit.>")
}

// agentRules are the publish rules of an agent's runs, shared by the
// agent and serve roles.
func agentRules(n natsjs.Names, s protocol.Subjects) []Rule {
	return []Rule{
		{"", []string{s.All(protocol.KindTask), s.All(protocol.KindApproval), s.All(protocol.KindCancel)}},
		{"approval timeouts: the decision the server writes at a timeout,\n scheduled with the announcement (SPEC §12); not the decision subjects", []string{natsjs.ExpirySchedules(n.Prefix)}},
		{"the streams' info: the binaries check at start-up that what they\n use exists (created by admin with agent provision)", streamInfos(n)},
		{"results, answers and decisions: ordered consumers and direct gets",
			append(append(reader(n.Results), reader(n.Answers)...), reader(n.Decisions)...)},
		{"the registry, read (watch and get)", append(reader(n.RegistryStream), "$JS.FC."+n.RegistryStream+".>")},
		{"the conversation store, read and write", append(append([]string{"$KV." + n.ConversationsBucket + ".>"},
			reader(n.ConversationsStream)...), "$JS.FC."+n.ConversationsStream+".>")},
		{"histories over the max payload (object store), read and write", append(append([]string{"$O." + n.HistoriesBucket + ".>"},
			reader(n.HistoriesStream)...), "$JS.API.STREAM.PURGE."+n.HistoriesStream, "$JS.FC."+n.HistoriesStream+".>")},
		{"the approvals it announced, looked up (agent pending)",
			[]string{"$JS.API.DIRECT.GET." + n.Approvals, "$JS.API.DIRECT.GET." + n.Approvals + ".>"}},
		{"the pending records, read and write (the conversation store\n writes them with every save)", append(append([]string{"$KV." + n.PendingBucket + ".>"},
			reader(n.PendingStream)...), "$JS.FC."+n.PendingStream+".>")},
		{"the index of pending calls, kept with them: entries published, read\n (batched direct gets) and removed by sequence", []string{
			n.Prefix + ".pindex.>", "$JS.API.DIRECT.GET." + n.PendingIndex, "$JS.API.STREAM.MSG.DELETE." + n.PendingIndex}},
		{"the index of the conversations' statuses, kept with the status index:\n entries published, read (batched direct gets) and removed by sequence", []string{
			n.Prefix + ".sindex.>", "$JS.API.DIRECT.GET." + n.StatusIndex, "$JS.API.STREAM.MSG.DELETE." + n.StatusIndex}},
	}
}

// serveGrants are what `agent serve` adds to an agent's runs: its wake
// markers and run events, published and read, the acknowledgements of
// the wake consumers (v1 and v2 formats), the notification consumer of
// --notify, read and acknowledged, and the expiries stream watched for
// roll-ups.
func serveGrants(n natsjs.Names, s protocol.Subjects) []string {
	out := []string{s.Prefix + ".wake.>", s.Prefix + ".event.>"}
	out = append(append(out, reader(n.Wake)...), reader(n.Events)...)
	for _, stream := range natsjs.WakeStreams(n.Prefix) {
		out = append(out, "$JS.ACK."+stream+"."+natsjs.WakeConsumerName+".>", "$JS.ACK.*.*."+stream+"."+natsjs.WakeConsumerName+".>")
	}
	// --notify: the notification consumer on the approvals stream, that
	// one only (the stream is not read otherwise: the announcement a
	// resolution names is a direct get, granted above).
	a, c := n.Approvals, natsjs.NotifyConsumerName
	out = append(out, "$JS.API.CONSUMER.INFO."+a+"."+c, "$JS.API.CONSUMER.CREATE."+a+"."+c, "$JS.API.CONSUMER.MSG.NEXT."+a+"."+c,
		"$JS.ACK."+a+"."+c+".>", "$JS.ACK.*.*."+a+"."+c+".>")
	// The guard of the scheduled timeouts: an ordered consumer of the
	// expiries stream, headers only, that sees a roll-up (issue 37).
	e := n.Expiries
	return append(out, "$JS.API.CONSUMER.CREATE."+e+".>", "$JS.API.CONSUMER.INFO."+e+".>", "$JS.API.CONSUMER.DELETE."+e+".>",
		"$JS.API.CONSUMER.MSG.NEXT."+e+".>")
}

// Worker returns the permissions of a worker user named user serving
// tools, for prefix ("" means [protocol.DefaultPrefix]). Each tool's
// grants name the tool: its task consumer, the subjects ending with its
// name, its registry keys.
func Worker(prefix, user string, tools []string) Permissions {
	n := natsjs.NamesFor(prefix)
	s := protocol.Subjects{Prefix: n.Prefix}
	p := Permissions{
		Publish: []Rule{{"the info of the tasks stream and of the registry's, whose subjects name\n tools and workers alone: a worker checks at start-up that they exist\n (created by admin with agent provision); no other stream's (a stream's\n info lists its subjects, and so every tool's conversations and tasks:\n a worker finds the results, cancels and effect ledger by direct gets of\n its own subjects and keys)", []string{
			"$JS.API.STREAM.INFO." + n.Tasks, "$JS.API.STREAM.INFO." + n.RegistryStream,
		}}},
	}
	var subs []string
	for _, t := range tools {
		c := natsjs.TaskConsumerName(t)
		p.Publish = append(p.Publish, Rule{
			"tool " + t + ": bind, create (the filtered create API) and pull its task\n consumer; acknowledge its deliveries (v1 format, and the v2 format of\n server 2.14+); its results and progress; look its cancels up; its\n registry keys (puts and deletes)",
			[]string{
				"$JS.API.CONSUMER.INFO." + n.Tasks + "." + c,
				"$JS.API.CONSUMER.CREATE." + n.Tasks + "." + c + "." + s.Task(t),
				"$JS.API.CONSUMER.MSG.NEXT." + n.Tasks + "." + c,
				"$JS.ACK." + n.Tasks + "." + c + ".>", "$JS.ACK.*.*." + n.Tasks + "." + c + ".>",
				s.OfTool(protocol.KindResult, t), s.OfTool(protocol.KindProgress, t),
				"$JS.API.DIRECT.GET." + n.Cancel + "." + s.OfTool(protocol.KindCancel, t),
				"$KV." + n.RegistryBucket + "." + t + ".*",
			},
		}, Rule{
			"tool " + t + ": the effect ledger's entries of its attempts, keys\n <tool>.<task>.<attempt> (written with compare-and-set, read by direct\n gets of their keys), and its\n stored results, looked up by their task's subject: a result stored\n before its worker died is not run again (SPEC §13)",
			[]string{
				"$KV." + n.EffectsBucket + "." + t + ".*.*",
				"$JS.API.DIRECT.GET." + n.EffectsStream + ".$KV." + n.EffectsBucket + "." + t + ".*.*",
				"$JS.API.DIRECT.GET." + n.Results + "." + s.OfTool(protocol.KindResult, t),
			},
		}, Rule{
			"tool " + t + ": fleet control (SPEC §19): its shared state, key <tool>.state\n of the limits bucket, and its queued calls, keys <tool>.<task>.<attempt>\n of the queue bucket (written with compare-and-set, read by direct gets\n of their keys); its dead letters (and the look-up that finds their\n stream); its task consumer's pause, for a\n cool-down an upstream asked for",
			[]string{
				"$KV." + n.LimitsBucket + "." + natsjs.LimitsKey(t),
				"$JS.API.DIRECT.GET." + n.LimitsStream + ".$KV." + n.LimitsBucket + "." + natsjs.LimitsKey(t),
				"$KV." + n.QueueBucket + "." + t + ".*.*",
				"$JS.API.DIRECT.GET." + n.QueueStream + ".$KV." + n.QueueBucket + "." + t + ".*.*",
				s.OfTool(protocol.KindDead, t), "$JS.API.DIRECT.GET." + n.Dead + "." + s.OfTool(protocol.KindDead, t),
				"$JS.API.CONSUMER.PAUSE." + n.Tasks + "." + c,
			},
		})
		subs = append(subs, s.OfTool(protocol.KindCancel, t), "$KV."+n.LimitsBucket+"."+natsjs.LimitsKey(t))
	}
	p.Subscribe = []Rule{{"", append(subs, InboxPrefix(user)+".>")}}
	return p
}
