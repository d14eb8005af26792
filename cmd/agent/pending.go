package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/agent/liveview"
)

// newPendingCmd is agent pending (SPEC §6.1): each pending call of one
// conversation, or of every stored conversation with pending calls, then
// the commands that resolve it. The calls are those of the stored pending
// record, and the approvals a live run with --approve wait waits for.
func newPendingCmd(e env) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "pending [--conversation ID]",
		Short: "List the pending calls of a conversation (or of all) and the commands that resolve them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			o, err := storeCmd{e: e, f: f}.open(ctx)
			if err != nil {
				return err
			}
			defer o.c.close()
			ids := []string{f.conversation}
			if f.conversation == "" {
				if ids, err = o.Store.List(ctx); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
			}
			for _, id := range ids {
				st, err := o.load(ctx, id)
				if err != nil {
					return err
				}
				pending := o.Waiting(ctx, st)
				if len(pending) == 0 {
					continue
				}
				if f.conversation == "" {
					fmt.Fprintf(e.stdout, "# conversation %s\n", id)
				}
				liveview.WritePending(e.stdout, pending, resolveCommands(f, o.c.embedded, id))
			}
			return nil
		},
	}
	registerStoreFlags(cmd, f, e)
	cmd.Flags().StringVar(&f.conversation, "conversation", "", "the conversation (default: every stored conversation with pending calls)")
	return cmd
}
