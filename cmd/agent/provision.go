package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/internal/natsflags"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/tool"
)

// provisionFlags are the flags of `agent provision`.
type provisionFlags struct {
	prefix string
	tools  string
	conn   natsflags.Flags
}

// newProvisionCmd is `agent provision`: an operator (the admin user of
// deploy/nats/auth.conf) creates every stream, KV bucket, agent serve's
// wake consumers and the task consumers of --tools from jetstream/, so that agents and workers can run
// with least-privilege users.
func newProvisionCmd(e env) *cobra.Command {
	f := &provisionFlags{}
	cmd := &cobra.Command{
		Use:   "provision [flags]",
		Short: "Create or check every stream, bucket, the wake consumers and the tools' consumers (as the admin user)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("provision takes no arguments")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return provision(cmd.Context(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.prefix, "prefix", protocol.DefaultPrefix, "subject prefix")
	fl.StringVar(&f.tools, "tools", "", "comma-separated tools whose consumers (tasks, max-deliveries advisories) to create (workers may create their own)")
	f.conn.Register(fl, e.getenv, e.getenv("NATS_URL"), "NATS server URL (env NATS_URL, where a password belongs: e.g. NATS_URL=nats://admin:PASSWORD@127.0.0.1:4222)")
	return cmd
}

func provision(ctx context.Context, e env, f *provisionFlags) error {
	if err := protocol.ValidatePrefix(f.prefix); err != nil {
		return usageErr("--prefix: %v", err)
	}
	tools := splitList(f.tools)
	for _, name := range tools {
		if err := tool.ValidateName(name); err != nil {
			return usageErr("--tools: %v", err)
		}
	}
	copts, err := f.conn.Options(e.getenv)
	if err != nil {
		return usageErr("%v", err)
	}
	if w := f.conn.ArgvSecretWarning(); w != "" {
		fmt.Fprintln(e.stderr, "agent:", w)
	}
	if f.conn.URL == "" && copts.Context == nil {
		return usageErr("provision needs a server: --nats URL (or NATS_URL) or --context; the embedded default provisions itself")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := agentproc.Dial(ctx, agentproc.DialOptions{URL: f.conn.URL, Connect: copts, Name: "agent provision", Role: "admin"})
	if err != nil {
		return &exitError{Code: exitFailed, Err: err}
	}
	defer c.Close(context.WithoutCancel(ctx))
	ctx, stopWatch := c.Refusals.Watch(ctx) // a permission lacking ends it at once
	defer stopWatch()
	done, err := agentproc.Provision(ctx, c.NC, natsjs.ProvisionOptions{Prefix: f.prefix, Replicas: f.conn.Replicas}, tools)
	if err != nil {
		return &exitError{Code: exitFailed, Err: err}
	}
	for _, s := range done.Streams {
		fmt.Fprintf(e.stdout, "stream %s %s\n", s.Name, strings.Join(s.Subjects, ","))
	}
	for _, c := range done.Consumers {
		fmt.Fprintf(e.stdout, "consumer %s %s\n", c[0], c[1])
	}
	fmt.Fprintf(e.stdout, "pending records and status entries of %d stored conversations written\n", done.Reprojected)
	if done.Obsolete != "" {
		fmt.Fprintf(e.stderr, "stream %s is no longer used (a worker answers exhausted tasks itself); delete it: nats stream rm -f %s\n", done.Obsolete, done.Obsolete)
	}
	return nil
}
