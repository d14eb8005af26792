package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/natsjs/toolctl"
)

// newToolsCmd is agent tools (SPEC §19): the operator's hands on the
// fleet's tools, whose subcommands toolctl.CLI runs.
func newToolsCmd(e env) *cobra.Command {
	f, cli := &runFlags{role: "admin"}, &toolctl.CLI{}
	cmd := &cobra.Command{Use: toolctl.CLIUse, Short: toolctl.CLIShort, Args: cobra.MaximumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connect(cmd.Context(), e, f, newLogger(e.stderr, f.verbose), nil)
			if err != nil {
				return err
			}
			defer c.close()
			cfg := toolctl.Config{Conn: c.NC, Provision: f.conn.ProvisionOptions(f.prefix)}
			if c.Server != nil {
				cfg.TaskKey = c.Server.TaskKey() // replays of the embedded store's approved tasks
			}
			if err := cli.Run(cmd.Context(), cfg, args, e.stdout); errors.Is(err, toolctl.ErrUsage) {
				return usageErr("%v", err)
			} else if err != nil {
				return &exitError{Code: exitFailed, Err: err}
			}
			return nil
		}}
	registerStoreFlags(cmd, f, e)
	cli.Register(cmd.Flags(), e.getenv("USER"))
	return cmd
}
