package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
)

// newPendingCmd is agent pending (SPEC §6.1): each pending call of one
// conversation, or of every conversation with a pending record, then the
// commands that resolve it. The calls are those of the pending records
// (bucket <prefix>_pending, less what people answered since the record's
// save), and the approvals a live run with --approve wait waits for. It
// reads no conversation's state or history: the approver and answerer
// roles run it.
func newPendingCmd(e env) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "pending [--conversation ID]",
		Short: "List the pending calls of a conversation (or of all) and the commands that resolve them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if f.conversation != "" {
				if err := checkConversationFlag(f.conversation); err != nil {
					return err
				}
			}
			o, err := peopleCmd{e: e, f: f}.open(ctx)
			if err != nil {
				return err
			}
			defer o.c.close()
			ids := []string{f.conversation}
			if f.conversation == "" {
				if ids, err = o.List(ctx); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				for _, id := range o.liveConversations(ctx) {
					if !slices.Contains(ids, id) {
						ids = append(ids, id)
					}
				}
				slices.Sort(ids)
			}
			for _, id := range ids {
				var pending []deferred.PendingTask
				recorded := map[string]bool{}
				sum, err := o.Get(ctx, id)
				switch {
				case errors.Is(err, conversation.ErrNotFound):
				case err != nil:
					return &exitError{code: exitFailed, err: err}
				default:
					if pending, err = o.Waiting(ctx, sum); err != nil {
						return &exitError{code: exitFailed, err: err}
					}
					for _, t := range sum.Tasks {
						recorded[t.TaskID] = true
					}
				}
				pending = append(pending, o.liveApprovals(ctx, id, recorded)...)
				if len(pending) == 0 {
					if f.conversation != "" && sum == nil {
						fmt.Fprintf(e.stderr, "conversation %s waits for nothing: it has no pending record (it finished, or is unknown)\n", id)
					}
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
	cmd.Flags().StringVar(&f.conversation, "conversation", "", "the conversation (default: every conversation with pending calls)")
	return cmd
}
