package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/natsjs/authconf"
	"github.com/offload-dev/offload/pkg/natsjs/convstore"
	"github.com/offload-dev/offload/pkg/protocol"
)

// The users of deploy/nats/auth.conf (authconf.Shipped: one per role, and
// one worker user per pool of built-in tools), and the passwords the tests
// give them through the environment, as an operator does.
var roles = func() []string {
	var out []string
	for _, u := range authconf.Shipped().Users {
		out = append(out, u.Name)
	}
	return out
}()

func password(role string) string { return "test-password-of-" + role }

func passwordEnv(role string) string { return authconf.PasswordEnv(role) }

// The names of the default prefix, which auth.conf is written for.
const (
	conversationsBucket = "tools_conversations"
	historiesBucket     = "tools_histories"
)

var names = natsjs.NamesFor("")

// deployServer is a nats-server started from deploy/nats/nats-server.conf,
// parsed by the server's own config parser (auth.conf included, passwords
// from the environment), on a random loopback port.
type deployServer struct {
	srv  *server.Server
	conv string // a conversation and task with a message of each kind
	task string
}

func startDeployServer(t *testing.T) *deployServer {
	t.Helper()
	d := startBareDeployServer(t)
	d.provision(t)
	return d
}

// startBareDeployServer starts the server with nothing provisioned.
func startBareDeployServer(t *testing.T) *deployServer {
	t.Helper()
	return startDeployServerFrom(t, "nats/nats-server.conf", nil)
}

// startBareDeployServerWith starts the server with nothing provisioned,
// its options changed by change (if set) before it starts.
func startBareDeployServerWith(t *testing.T, change func(*server.Options)) *deployServer {
	t.Helper()
	return startDeployServerFrom(t, "nats/nats-server.conf", change)
}

// startDeployServerFrom starts a server from the configuration file conf,
// with nothing provisioned, its options changed by change (if set) before
// it starts.
func startDeployServerFrom(t *testing.T, conf string, change func(*server.Options)) *deployServer {
	t.Helper()
	dir := t.TempDir()
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Host != "127.0.0.1" {
		t.Fatalf("the deploy config listens on %q, want loopback", opts.Host)
	}
	opts.Port = -1
	opts.HTTPPort = 0
	opts.StoreDir = dir
	opts.NoSigs = true
	opts.NoLog = true
	if change != nil {
		change(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return &deployServer{srv: srv, conv: protocol.NewID(), task: protocol.NewID()}
}

// provision creates, as admin, what `agent provision` creates, plus the
// conversation store's buckets, and one message of each kind.
func (d *deployServer) provision(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	nc := d.connect(t, "admin", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if err := natsjs.Provision(ctx, js, natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := convstore.EnsureServiceKeys(ctx, convstore.OpenConfig{JetStream: js}); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.EnsureTaskConsumer(ctx, js, "sleep", natsjs.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	reg, err := natsjs.EnsureRegistry(ctx, js, natsjs.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Put(ctx, "sleep.w1", []byte(`{"name":"sleep"}`)); err != nil {
		t.Fatal(err)
	}
	// Provision made the conversation store's buckets.
	convs, err := js.KeyValue(ctx, conversationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := convs.Put(ctx, d.conv, []byte(`{"pending":[]}`)); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, historiesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, d.conv+".history", []byte(`[]`)); err != nil {
		t.Fatal(err)
	}
	pending, err := js.KeyValue(ctx, names.PendingBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pending.Put(ctx, d.conv, []byte(`{"conversation_id":"`+d.conv+`","tasks":[]}`)); err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	for _, subject := range []string{
		indexEntry(d.conv, d.task),
		s.Result(d.conv, d.task, "sleep"), s.Answer(d.conv, d.task), s.Decision(d.conv, d.task),
		s.Approval(d.conv, d.task), s.Cancel(d.conv, d.task, "sleep"),
		s.Task("sleep"), s.Task("sleep"),
	} {
		if _, err := js.Publish(ctx, subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
}

func (d *deployServer) connect(t *testing.T, role string, errs chan<- error) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.UserInfo(role, password(role)), nats.MaxReconnects(0), nats.CustomInboxPrefix(inboxPrefix(role))}
	if errs != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	}
	nc, err := nats.Connect(d.srv.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	return nc
}

// inboxPrefix is the inbox prefix auth.conf gives role (the admin keeps
// _INBOX).
func inboxPrefix(role string) string {
	if role == "admin" {
		return "_INBOX"
	}
	return "_INBOX_" + role
}

// lastSeq returns a stream's last sequence, read as admin.
func (d *deployServer) lastSeq(t *testing.T, stream string) uint64 {
	t.Helper()
	nc := d.connect(t, "admin", nil)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// opEnv is what an operation runs with: a connection as the role.
type opEnv struct {
	t  *testing.T
	d  *deployServer
	nc *nats.Conn
	js jetstream.JetStream
}

// errUnchanged is returned by an operation whose effect did not happen
// although no error was reported: it did not take place.
var errUnchanged = errors.New("no effect")

// publishJS publishes on subject with JetStream and checks, as admin, that
// stream grew by it.
func (e opEnv) publishJS(ctx context.Context, stream, subject, data string) error {
	before := e.d.lastSeq(e.t, stream)
	_, err := e.js.Publish(ctx, subject, []byte(data))
	after := e.d.lastSeq(e.t, stream)
	if err != nil {
		if after != before {
			e.t.Errorf("publish on %s failed (%v) but %s changed", subject, err, stream)
		}
		return err
	}
	if after != before+1 {
		return errUnchanged
	}
	return nil
}

func (e opEnv) subscribe(ctx context.Context, subject string) error {
	sub, err := e.nc.SubscribeSync(subject)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	return e.nc.FlushWithContext(ctx)
}

// readStream reads the first message of stream with an ordered consumer.
func (e opEnv) readStream(ctx context.Context, stream string) error {
	c, err := e.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	_, err = c.Next(jetstream.FetchContext(ctx))
	return err
}

// indexEntry is the subject of the entry of an approval of sleep, task
// of conversation conv, in the index of pending calls.
func indexEntry(conv, task string) string {
	return "tools.pindex." + conv + "." + task + ".people.approval.~.sleep"
}

// directGet looks the last message on subject up in stream with a direct
// get (no stream info): a stored one or none.
func (e opEnv) directGet(ctx context.Context, stream, subject string) error {
	m, err := e.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return err
	}
	if st := m.Header.Get("Status"); st != "" && st != "404" {
		return fmt.Errorf("direct get: status %s", st)
	}
	return nil
}

// putKey writes key of bucket as a worker does, a message on the key's
// subject (no bucket bound: no stream info read), with the expected last
// subject sequence expect unless it is "".
func (e opEnv) putKey(ctx context.Context, bucket, key, value, expect string) error {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Data = []byte(value)
	if expect != "" {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, expect)
	}
	_, err := e.js.PublishMsg(ctx, m)
	return err
}

// listSubjects asks stream's info with every subject listed.
func (e opEnv) listSubjects(ctx context.Context, stream string) error {
	st, err := e.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	_, err = st.Info(ctx, jetstream.WithSubjectFilter(">"))
	return err
}

func (e opEnv) kv(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	return e.js.KeyValue(ctx, bucket)
}

type op struct {
	name string
	run  func(ctx context.Context, e opEnv) error
}

var s = protocol.Subjects{}

// ops are the operations of SPEC §9's roles; each is measured for every
// role, in this order (a worker pulls the first task before it loads the
// second one).
func ops(d *deployServer) []op {
	conv, task := d.conv, d.task
	taskJSON := fmt.Sprintf(`{"task_id":%q,"tool":"shell","args":{"command":"id"},"conversation_id":%q,"approved":true}`, protocol.NewID(), conv)
	return []op{
		{"publish a task (tools.task.>)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Tasks, s.Task("shell"), taskJSON)
		}},
		// Finding 2 of issue 30: the http_fetch worker's credential
		// answered a shell task.
		{"publish a result for a shell task (tools.result.*.*.shell)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Results, s.Result(conv, protocol.NewID(), "shell"), `{"content":"forged"}`)
		}},
		{"publish a result for a sleep task (tools.result.*.*.sleep)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Results, s.Result(conv, protocol.NewID(), "sleep"), `{"content":"slept"}`)
		}},
		{"publish an answer (tools.answer.>)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Answers, s.Answer(conv, protocol.NewID()), `{"content":"42"}`)
		}},
		{"publish a decision (tools.decision.>)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Decisions, s.Decision(conv, protocol.NewID()), `{"approved":true}`)
		}},
		{"publish an approval announcement (tools.approval.>)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Approvals, s.Approval(conv, protocol.NewID()), `{}`)
		}},
		{"publish a cancel (tools.cancel.>)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Cancel, s.Cancel(conv, protocol.NewID(), "shell"), `{}`)
		}},
		{"publish progress on a sleep task (tools.progress.*.*.sleep)", func(ctx context.Context, e opEnv) error {
			if err := e.nc.Publish(s.Progress(conv, task, "sleep"), []byte(`{}`)); err != nil {
				return err
			}
			return e.nc.FlushWithContext(ctx)
		}},
		{"subscribe to progress", func(ctx context.Context, e opEnv) error { return e.subscribe(ctx, s.All(protocol.KindProgress)) }},
		{"subscribe to every cancel (tools.cancel.>)", func(ctx context.Context, e opEnv) error { return e.subscribe(ctx, s.All(protocol.KindCancel)) }},
		{"subscribe to sleep's cancels (tools.cancel.*.*.sleep)", func(ctx context.Context, e opEnv) error {
			return e.subscribe(ctx, s.OfTool(protocol.KindCancel, "sleep"))
		}},
		{"subscribe to approval announcements", func(ctx context.Context, e opEnv) error { return e.subscribe(ctx, s.All(protocol.KindApproval)) }},
		{"subscribe to tasks (core)", func(ctx context.Context, e opEnv) error { return e.subscribe(ctx, s.All(protocol.KindTask)) }},
		{"subscribe to results (core)", func(ctx context.Context, e opEnv) error { return e.subscribe(ctx, s.All(protocol.KindResult)) }},
		{"subscribe to the agent's replies (_INBOX_agent.>)", func(ctx context.Context, e opEnv) error { return e.subscribe(ctx, "_INBOX_agent.>") }},
		// The deliveries of sleep's tasks come to the sleep worker's inbox.
		{"subscribe to the sleep worker's replies (_INBOX_worker_sleep.>)", func(ctx context.Context, e opEnv) error {
			return e.subscribe(ctx, "_INBOX_worker_sleep.>")
		}},
		{"subscribe to every reply (_INBOX.>)", func(ctx context.Context, e opEnv) error { return e.subscribe(ctx, "_INBOX.>") }},
		{"read the results stream", func(ctx context.Context, e opEnv) error { return e.readStream(ctx, names.Results) }},
		{"read the answers stream", func(ctx context.Context, e opEnv) error { return e.readStream(ctx, names.Answers) }},
		{"read the decisions stream", func(ctx context.Context, e opEnv) error { return e.readStream(ctx, names.Decisions) }},
		{"read the approvals stream", func(ctx context.Context, e opEnv) error { return e.readStream(ctx, names.Approvals) }},
		{"look a sleep task's cancel up (direct get)", func(ctx context.Context, e opEnv) error {
			return e.directGet(ctx, names.Cancel, s.Cancel(conv, task, "sleep"))
		}},
		// A stream's info with a subjects filter lists its subjects: the
		// conversations and tasks of every tool. Workers find the streams
		// they use beside the tasks stream by direct gets instead.
		{"list the results stream's subjects (stream info)", func(ctx context.Context, e opEnv) error {
			return e.listSubjects(ctx, names.Results)
		}},
		{"list the cancel stream's subjects (stream info)", func(ctx context.Context, e opEnv) error {
			return e.listSubjects(ctx, names.Cancel)
		}},
		{"list the effect ledger's keys (stream info)", func(ctx context.Context, e opEnv) error {
			return e.listSubjects(ctx, names.EffectsStream)
		}},
		{"bind sleep's task consumer", func(ctx context.Context, e opEnv) error {
			_, err := e.js.Consumer(ctx, names.Tasks, natsjs.TaskConsumerName("sleep"))
			return err
		}},
		{"create http_fetch's task consumer", func(ctx context.Context, e opEnv) error {
			_, err := natsjs.EnsureTaskConsumer(ctx, e.js, "http_fetch", natsjs.ProvisionOptions{})
			return err
		}},
		{"pull a sleep task, in-progress and ack it", func(ctx context.Context, e opEnv) error {
			c, err := e.js.Consumer(ctx, names.Tasks, natsjs.TaskConsumerName("sleep"))
			if err != nil {
				return err
			}
			m, err := c.Next(jetstream.FetchContext(ctx))
			if err != nil {
				return err
			}
			if err := m.InProgress(); err != nil {
				return err
			}
			return m.DoubleAck(ctx)
		}},
		{"load and delete a stored task (MSG.GET, MSG.DELETE on the task stream)", func(ctx context.Context, e opEnv) error {
			st, err := e.js.Stream(ctx, names.Tasks)
			if err != nil {
				return err
			}
			raw, err := st.GetLastMsgForSubject(ctx, s.Task("sleep"))
			if err != nil {
				return err
			}
			return st.DeleteMsg(ctx, raw.Sequence)
		}},
		{"read the registry (get, watch)", func(ctx context.Context, e opEnv) error {
			kv, err := e.kv(ctx, names.RegistryBucket)
			if err != nil {
				return err
			}
			if _, err := kv.Get(ctx, "sleep.w1"); err != nil {
				return err
			}
			w, err := kv.WatchAll(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = w.Stop() }()
			for {
				select {
				case u := <-w.Updates():
					if u == nil {
						return nil
					}
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}},
		// Finding 3 of issue 30: any worker re-described any tool (a
		// forged schema, requires_approval false) or hid it with deletes.
		{"write a registry key of sleep", func(ctx context.Context, e opEnv) error {
			return e.putKey(ctx, names.RegistryBucket, "sleep.w2", `{"name":"sleep","requires_approval":false}`, "")
		}},
		{"read the pending records (get, list)", func(ctx context.Context, e opEnv) error {
			kv, err := e.kv(ctx, names.PendingBucket)
			if err != nil {
				return err
			}
			if _, err := kv.Get(ctx, conv); err != nil {
				return err
			}
			l, err := kv.ListKeys(ctx)
			if err != nil {
				return err
			}
			for range l.Keys() { // closed once every key was listed
			}
			return nil
		}},
		{"write a pending record", func(ctx context.Context, e opEnv) error {
			kv, err := e.kv(ctx, names.PendingBucket)
			if err != nil {
				return err
			}
			_, err = kv.Put(ctx, protocol.NewID(), []byte(`{}`))
			return err
		}},
		// The index of pending calls (SPEC §21): read a page of it (the
		// paged views), add and remove an entry (the conversation store).
		{"read the index of pending calls (direct get by filter)", func(ctx context.Context, e opEnv) error {
			req := fmt.Sprintf(`{"seq":1,"next_by_subj":%q}`, "tools.pindex.>")
			m, err := e.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+names.PendingIndex, []byte(req))
			if err != nil {
				return err
			}
			if st := m.Header.Get("Status"); st != "" {
				return fmt.Errorf("direct get: status %s", st)
			}
			return nil
		}},
		{"add an entry to the index of pending calls", func(ctx context.Context, e opEnv) error {
			_, err := e.js.Publish(ctx, indexEntry(conv, protocol.NewID()), nil)
			return err
		}},
		{"remove an entry of the index of pending calls (MSG.DELETE)", func(ctx context.Context, e opEnv) error {
			req := fmt.Sprintf(`{"last_by_subj":%q}`, indexEntry(conv, task))
			m, err := e.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+names.PendingIndex, []byte(req))
			if err != nil {
				return err
			}
			if st := m.Header.Get("Status"); st != "" {
				return fmt.Errorf("direct get: status %s", st)
			}
			seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return err
			}
			r, err := e.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+names.PendingIndex, fmt.Appendf(nil, `{"seq":%d}`, seq))
			if err != nil {
				return err
			}
			if !strings.Contains(string(r.Data), `"success":true`) {
				return fmt.Errorf("remove: %s", r.Data)
			}
			return nil
		}},
		// The index of statuses (SPEC §21): the conversation store's, read
		// by agent serve's conversations page.
		{"read the index of statuses (direct get by filter)", func(ctx context.Context, e opEnv) error {
			req := fmt.Sprintf(`{"seq":1,"next_by_subj":%q}`, "tools.sindex.>")
			m, err := e.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+names.StatusIndex, []byte(req))
			if err != nil {
				return err
			}
			if st := m.Header.Get("Status"); st != "" && st != "404" {
				return fmt.Errorf("direct get: status %s", st)
			}
			return nil
		}},
		{"add a message to the index of statuses", func(ctx context.Context, e opEnv) error {
			_, err := e.js.Publish(ctx, "tools.sindex."+protocol.NewID()+".paused", []byte(`{}`))
			return err
		}},
		{"look a task's decision up (direct get by subject)", func(ctx context.Context, e opEnv) error {
			return e.directGet(ctx, names.Decisions, s.Decision(conv, task))
		}},
		{"look a task's answer up (direct get by subject)", func(ctx context.Context, e opEnv) error {
			return e.directGet(ctx, names.Answers, s.Answer(conv, task))
		}},
		{"read a history object", func(ctx context.Context, e opEnv) error {
			obs, err := e.js.ObjectStore(ctx, historiesBucket)
			if err != nil {
				return err
			}
			_, err = obs.GetBytes(ctx, conv+".history")
			return err
		}},
		{"look an approval up (stream info, direct get)", func(ctx context.Context, e opEnv) error {
			st, err := e.js.Stream(ctx, names.Approvals)
			if err != nil {
				return err
			}
			if _, err := st.Info(ctx, jetstream.WithSubjectFilter(s.ApprovalsFor(conv))); err != nil {
				return err
			}
			_, err = st.GetLastMsgForSubject(ctx, s.Approval(conv, task))
			return err
		}},
		// SPEC §13: a worker of a tool keeps the ledger entries of its
		// tool's attempts and looks its tool's stored results up, no
		// other's.
		{"write and read an effect entry of sleep (create, get)", func(ctx context.Context, e opEnv) error {
			key := "sleep." + protocol.NewID() + ".0"
			if err := e.putKey(ctx, names.EffectsBucket, key, `{"started":{"worker":"w1"}}`, "0"); err != nil {
				return err
			}
			return e.directGet(ctx, names.EffectsStream, "$KV."+names.EffectsBucket+"."+key)
		}},
		{"write an effect entry of shell", func(ctx context.Context, e opEnv) error {
			return e.putKey(ctx, names.EffectsBucket, "shell."+protocol.NewID()+".0", `{"started":{"worker":"w1"}}`, "0")
		}},
		{"look a sleep task's stored result up (direct get by subject)", func(ctx context.Context, e opEnv) error {
			return e.directGet(ctx, names.Results, s.Result(conv, task, "sleep"))
		}},
		{"look a shell task's stored result up (direct get by subject)", func(ctx context.Context, e opEnv) error {
			return e.directGet(ctx, names.Results, s.Result(conv, task, "shell"))
		}},
		{"delete a registry key of sleep", func(ctx context.Context, e opEnv) error {
			m := nats.NewMsg("$KV." + names.RegistryBucket + ".sleep.w1")
			m.Header.Set("KV-Operation", "DEL")
			_, err := e.js.PublishMsg(ctx, m)
			return err
		}},
		{"read the conversation store", func(ctx context.Context, e opEnv) error {
			kv, err := e.kv(ctx, conversationsBucket)
			if err != nil {
				return err
			}
			_, err = kv.Get(ctx, conv)
			return err
		}},
		{"write the conversation store", func(ctx context.Context, e opEnv) error {
			kv, err := e.kv(ctx, conversationsBucket)
			if err != nil {
				return err
			}
			_, err = kv.Put(ctx, protocol.NewID(), []byte(`{}`))
			return err
		}},
		{"write and read a history object", func(ctx context.Context, e opEnv) error {
			obs, err := e.js.ObjectStore(ctx, historiesBucket)
			if err != nil {
				return err
			}
			if _, err := obs.PutBytes(ctx, conv, bytes.Repeat([]byte("h"), 300<<10)); err != nil {
				return err
			}
			_, err = obs.GetBytes(ctx, conv)
			return err
		}},
		// A stream's info lists its subjects (with a subjects filter): the
		// conversations and tasks of every tool.
		{"look the histories stream up (its info)", func(ctx context.Context, e opEnv) error {
			_, err := e.js.Stream(ctx, names.HistoriesStream)
			return err
		}},
		{"create a stream", func(ctx context.Context, e opEnv) error {
			_, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
			return err
		}},
		{"purge the task stream", func(ctx context.Context, e opEnv) error {
			st, err := e.js.Stream(ctx, names.Tasks)
			if err != nil {
				return err
			}
			if err := st.Purge(ctx); err != nil && strings.Contains(err.Error(), "purge not permitted") {
				return errUnchanged // the stream denies purges (issue 37), to admin too
			}
			return err
		}},
		{"delete a stored result", func(ctx context.Context, e opEnv) error {
			st, err := e.js.Stream(ctx, names.Results)
			if err != nil {
				return err
			}
			return st.DeleteMsg(ctx, 1)
		}},
		// Issue 37: the service's keys, separated by the permissions; its
		// wake markers and run events.
		{"read the decision key's public half (direct get)", func(ctx context.Context, e opEnv) error {
			return e.directGet(ctx, names.ServiceStream, "$KV."+names.ServiceBucket+".decisions.public")
		}},
		{"read the decision key's private half (direct get)", func(ctx context.Context, e opEnv) error {
			return e.directGet(ctx, names.ServiceStream, "$KV."+names.ServiceBucket+".decisions.private")
		}},
		{"read the links' key (direct get)", func(ctx context.Context, e opEnv) error {
			return e.directGet(ctx, names.ServiceStream, "$KV."+names.ServiceBucket+".links.key")
		}},
		{"write a key of the service's bucket", func(ctx context.Context, e opEnv) error {
			return e.putKey(ctx, names.ServiceBucket, "links.used."+protocol.NewID(), "used", "0")
		}},
		{"publish a wake marker (tools.wake.>)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Wake, natsjs.WakeSubject("", conv), "")
		}},
		{"publish a run event (tools.event.>)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Events, "tools.event."+conv, `{}`)
		}},
		// Fleet control (SPEC §19): a tool's shared state, written by its
		// workers and by the operator's hands (agent serve's /v1/tools);
		// the audit of the operators' actions.
		{"write sleep's fleet control state", func(ctx context.Context, e opEnv) error {
			return e.putKey(ctx, names.LimitsBucket, natsjs.LimitsKey("sleep"), `{}`, "")
		}},
		{"write shell's fleet control state", func(ctx context.Context, e opEnv) error {
			return e.putKey(ctx, names.LimitsBucket, natsjs.LimitsKey("shell"), `{}`, "")
		}},
		{"publish an audit record (tools.audit.>)", func(ctx context.Context, e opEnv) error {
			return e.publishJS(ctx, names.Audit, natsjs.AuditSubject("", "sleep"), `{}`)
		}},
	}
}

// allowed lists, per operation, the roles SPEC §9 lets do it; every other
// role must be refused.
var allowed = map[string][]string{
	"publish a task (tools.task.>)":                                          {"admin", "agent", "serve"},
	"publish a result for a shell task (tools.result.*.*.shell)":             {"admin", "worker_shell"},
	"publish a result for a sleep task (tools.result.*.*.sleep)":             {"admin", "worker_sleep"},
	"publish an answer (tools.answer.>)":                                     {"admin", "serve", "answerer"},
	"publish a decision (tools.decision.>)":                                  {"admin", "serve", "approver"},
	"publish an approval announcement (tools.approval.>)":                    {"admin", "agent", "serve"},
	"publish a cancel (tools.cancel.>)":                                      {"admin", "agent", "serve"},
	"publish progress on a sleep task (tools.progress.*.*.sleep)":            {"admin", "worker_sleep"},
	"subscribe to progress":                                                  {"admin", "agent", "serve"},
	"subscribe to every cancel (tools.cancel.>)":                             {"admin"},
	"subscribe to sleep's cancels (tools.cancel.*.*.sleep)":                  {"admin", "worker_sleep"},
	"subscribe to approval announcements":                                    {"admin", "approver"},
	"subscribe to tasks (core)":                                              {"admin"},
	"subscribe to the agent's replies (_INBOX_agent.>)":                      {"admin", "agent"},
	"subscribe to the sleep worker's replies (_INBOX_worker_sleep.>)":        {"admin", "worker_sleep"},
	"subscribe to every reply (_INBOX.>)":                                    {"admin"},
	"subscribe to results (core)":                                            {"admin"},
	"read the results stream":                                                {"admin", "agent", "serve"},
	"read the answers stream":                                                {"admin", "agent", "serve"},
	"read the decisions stream":                                              {"admin", "agent", "serve"},
	"read the approvals stream":                                              {"admin", "approver"},
	"look a sleep task's cancel up (direct get)":                             {"admin", "worker_sleep"},
	"list the results stream's subjects (stream info)":                       {"admin", "agent", "serve"},
	"list the cancel stream's subjects (stream info)":                        {"admin", "agent", "serve"},
	"list the effect ledger's keys (stream info)":                            {"admin", "agent", "serve"},
	"bind sleep's task consumer":                                             {"admin", "worker_sleep"},
	"create http_fetch's task consumer":                                      {"admin", "worker_http"},
	"pull a sleep task, in-progress and ack it":                              {"admin", "worker_sleep"},
	"load and delete a stored task (MSG.GET, MSG.DELETE on the task stream)": {"admin"},
	"read the registry (get, watch)":                                         {"admin", "agent", "serve"},
	"write a registry key of sleep":                                          {"admin", "worker_sleep"},
	"delete a registry key of sleep":                                         {"admin", "worker_sleep"},
	"write and read an effect entry of sleep (create, get)":                  {"admin", "worker_sleep"},
	"write an effect entry of shell":                                         {"admin", "worker_shell"},
	"look a sleep task's stored result up (direct get by subject)":           {"admin", "agent", "serve", "worker_sleep"},
	"look a shell task's stored result up (direct get by subject)":           {"admin", "agent", "serve", "worker_shell"},
	"read the pending records (get, list)":                                   {"admin", "agent", "serve", "approver", "answerer"},
	"write a pending record":                                                 {"admin", "agent", "serve"},
	"read the index of pending calls (direct get by filter)":                 {"admin", "agent", "serve", "approver", "answerer"},
	"add an entry to the index of pending calls":                             {"admin", "agent", "serve"},
	"remove an entry of the index of pending calls (MSG.DELETE)":             {"admin", "agent", "serve"},
	"read the index of statuses (direct get by filter)":                      {"admin", "agent", "serve"},
	"add a message to the index of statuses":                                 {"admin", "agent", "serve"},
	"look a task's decision up (direct get by subject)":                      {"admin", "agent", "serve", "approver", "answerer"},
	"look a task's answer up (direct get by subject)":                        {"admin", "agent", "serve", "approver", "answerer"},
	"read a history object":                                                  {"admin", "agent", "serve"},
	"look an approval up (stream info, direct get)":                          {"admin", "agent", "serve", "approver", "answerer"},
	"read the conversation store":                                            {"admin", "agent", "serve"},
	"write the conversation store":                                           {"admin", "agent", "serve"},
	"write and read a history object":                                        {"admin", "agent", "serve"},
	"look the histories stream up (its info)":                                {"admin", "agent", "serve"},
	"create a stream":                                                        {"admin"},
	"purge the task stream":                                                  {}, // deny_purge: not even admin
	"delete a stored result":                                                 {"admin"},
	// agent serve's own (issue 37).
	"read the decision key's public half (direct get)":  {"admin", "agent", "serve"},
	"read the decision key's private half (direct get)": {"admin", "serve"},
	"read the links' key (direct get)":                  {"admin", "serve"},
	"write a key of the service's bucket":               {"admin", "serve"},
	"publish a wake marker (tools.wake.>)":              {"admin", "serve"},
	"publish a run event (tools.event.>)":               {"admin", "serve"},
	// Fleet control (issue 42).
	"write sleep's fleet control state":       {"admin", "serve", "worker_sleep"},
	"write shell's fleet control state":       {"admin", "serve", "worker_shell"},
	"publish an audit record (tools.audit.>)": {"admin", "serve"},
}

// outcome runs o as role on a fresh connection: "allowed" when it
// succeeds, "denied" when the server refuses it (a permissions violation,
// or no effect).
func outcome(t *testing.T, d *deployServer, role string, o op) (string, error) {
	t.Helper()
	errs := make(chan error, 16)
	nc := d.connect(t, role, errs)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.run(ctx, opEnv{t: t, d: d, nc: nc, js: js}) }()
	var opErr, violation error
	select {
	case opErr = <-done:
	case violation = <-errs:
		// Requests the server refused get no reply: stop waiting.
		cancel()
		opErr = <-done
	}
	if violation == nil {
		// A refused subscription or publish is reported asynchronously; the
		// server sends it before the flush's PONG, and the client records
		// it as its last error when it reads it.
		_ = nc.Flush()
		if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
			violation = err
		}
	}
	switch {
	case violation != nil || errors.Is(opErr, nats.ErrPermissionViolation):
		return "denied", nil
	case errors.Is(opErr, errUnchanged):
		return "denied", nil
	case opErr == nil:
		return "allowed", nil
	default:
		return "", fmt.Errorf("%s as %s: %w", o.name, role, opErr)
	}
}

// TestRolePermissions measures every operation of every role against a
// nats-server whose configuration includes deploy/nats/auth.conf, and
// prints the table of the measurements.
func TestRolePermissions(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	table := map[string]map[string]string{}
	var order []string
	for _, o := range ops(&deployServer{}) {
		order = append(order, o.name)
	}
	t.Run("roles", func(t *testing.T) {
		for _, role := range roles {
			t.Run(role, func(t *testing.T) {
				t.Parallel()
				d := startDeployServer(t)
				for _, o := range ops(d) {
					got, err := outcome(t, d, role, o)
					if err != nil {
						t.Error(err)
						continue
					}
					want := "denied"
					for _, r := range allowed[o.name] {
						if r == role {
							want = "allowed"
						}
					}
					if got != want {
						t.Errorf("%s as %s: %s, want %s", o.name, role, got, want)
					}
					mu.Lock()
					if table[o.name] == nil {
						table[o.name] = map[string]string{}
					}
					table[o.name][role] = got
					mu.Unlock()
				}
			})
		}
	})
	var b strings.Builder
	b.WriteString("| operation | " + strings.Join(roles, " | ") + " |\n|---|" + strings.Repeat("---|", len(roles)) + "\n")
	for _, name := range order {
		b.WriteString("| " + name)
		for _, r := range roles {
			b.WriteString(" | " + table[name][r])
		}
		b.WriteString(" |\n")
	}
	t.Logf("measured permissions:\n%s", b.String())
	if len(allowed) != len(order) || len(table) != len(order) {
		t.Errorf("%d operations measured, %d listed, %d expected", len(table), len(order), len(allowed))
	}
}
