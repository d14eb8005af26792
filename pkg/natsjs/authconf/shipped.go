package authconf

import "github.com/offload-dev/offload/pkg/protocol"

// ShippedWorkers are the worker users of the shipped auth.conf, one per
// pool of built-in tools: a credential serves only its pool's tools.
var ShippedWorkers = []struct {
	// User is the user name.
	User string
	// Tools are the built-in tools it serves.
	Tools []string
}{
	{"worker_sleep", []string{"sleep"}},
	{"worker_http", []string{"http_fetch"}},
	{"worker_files", []string{"list_dir", "read_file", "write_file"}},
	{"worker_shell", []string{"shell"}},
}

// Shipped returns deploy/nats/auth.conf: the default prefix, the admin,
// the agent, agent serve (serve), the worker users of [ShippedWorkers],
// the approver and the answerer.
func Shipped() File {
	users := []User{
		{Name: "admin", PasswordEnv: PasswordEnv("admin"), Comment: "provisions (agent provision); everything"},
		func() User {
			p := Agent(protocol.DefaultPrefix)
			return User{Name: "agent", PasswordEnv: PasswordEnv("agent"), Comment: "an agent (agent run, agent resume)", Permissions: &p}
		}(),
		func() User {
			p := Serve(protocol.DefaultPrefix)
			return User{Name: "serve", PasswordEnv: PasswordEnv("serve"), Comment: "agent serve's replicas", Permissions: &p}
		}(),
	}
	for _, w := range ShippedWorkers {
		users = append(users, WorkerUser(protocol.DefaultPrefix, w.User, w.Tools))
	}
	users = append(users,
		func() User {
			p := Approver(protocol.DefaultPrefix)
			return User{Name: "approver", PasswordEnv: PasswordEnv("approver"), Comment: "a person deciding approvals", Permissions: &p}
		}(),
		func() User {
			p := Answerer(protocol.DefaultPrefix)
			return User{Name: "answerer", PasswordEnv: PasswordEnv("answerer"), Comment: "a person answering external calls", Permissions: &p}
		}(),
	)
	return File{Header: shippedHeader(users), Users: users}
}

func shippedHeader(users []User) string {
	var envs []string
	for _, u := range users {
		envs = append(envs, u.PasswordEnv)
	}
	h := `Least-privilege NATS users for offload (SPEC §9). This file holds only the
authorization block, so any nats-server configuration can include it:

  include auth.conf            # path relative to the including file

Generated from pkg/natsjs/authconf (authconf.Shipped): do not edit by hand;
regenerate with  go test ./deploy -run TestAuthConfGenerated -update

Passwords come from the environment when the server starts; a missing one
stops the server (nothing starts with an empty password):
`
	for i := 0; i < len(envs); i += 3 {
		h += "  " + joinSpaces(envs[i:min(i+3, len(envs))]) + "\n"
	}
	h += `
Written for the default subject prefix "tools" (streams TOOLS_*, buckets
tools_*). For --prefix P, replace "tools." with "P.", "TOOLS_" with
"<P upper-cased>_" and "tools_" with "P_".

Trust comes from these permissions: a worker runs an approval-gated tool
for any task marked approved, so only agents publish tasks; a worker user
reads, pulls, answers and advertises only its own tools (the tool is the
last token of the result, progress and cancel subjects; its task consumer
and registry keys are named after it); people publish decisions (approver)
and answers to external calls (answerer), nothing else; agent serve (serve)
publishes those of the people its inbox, API and links authenticated,
signed with its decision key, which it alone reads (agents read its public
half, to verify them). No role may roll up or purge a stream it shares
with another: the streams refuse it (jetstream/README.md). Each allowed and
each denied operation is tested against a server including this file
(deploy/auth_test.go).

A worker user for your own tools: toolworker --config tools.yaml
--print-auth worker_mine prints its entry (with its permissions) for the
users list below; give it a password variable and start the worker with
--inbox-prefix _INBOX_worker_mine.

Replies (JetStream API responses, publish acknowledgements, consumer
deliveries) come to each user on its own inbox prefix, _INBOX_<user>, so
that no user reads another's replies (a worker cannot read the
conversations an agent loads, nor the tasks delivered to another tool's
worker). Start the binaries with --inbox-prefix _INBOX_<user> (env
NATS_INBOX_PREFIX), and the nats CLI with --inbox-prefix _INBOX_<user> (or
inbox_prefix in its context).`
	return h
}

func joinSpaces(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += "  "
		}
		out += v
	}
	return out
}
