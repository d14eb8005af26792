package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/pending"
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
	var queued bool
	cmd := &cobra.Command{
		Use:   "pending [--conversation ID] [--queued]",
		Short: "List the pending calls of a conversation (or of all) and the commands that resolve them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if f.conversation != "" {
				if err := checkConversationFlag(f.conversation); err != nil {
					return err
				}
			}
			o, err := openPeople(ctx, e, f)
			if err != nil {
				return err
			}
			defer o.c.close()
			calls, err := o.desk.Calls(ctx, pending.Filter{Conversation: f.conversation})
			if err != nil {
				return &exitError{Code: exitFailed, Err: err}
			}
			if len(calls) == 0 && f.conversation != "" {
				fmt.Fprintf(e.stderr, "conversation %s waits for nothing: it has no pending record (it finished, or is unknown), or every call of it was answered\n", f.conversation)
			}
			for i := 0; i < len(calls); {
				conv := calls[i].ConversationID
				var tasks []deferred.PendingTask
				for ; i < len(calls) && calls[i].ConversationID == conv; i++ {
					tasks = append(tasks, calls[i].PendingTask)
				}
				if f.conversation == "" {
					fmt.Fprintf(e.stdout, "# conversation %s\n", conv)
				}
				liveview.WritePending(e.stdout, tasks, resolveCommands(f, o.c.embedded, conv))
			}
			if !queued {
				return nil // the tools' states: not every role may read them
			}
			held, err := o.desk.Queued(ctx, pending.Filter{Conversation: f.conversation})
			if err != nil {
				return &exitError{Code: exitFailed, Err: err}
			}
			liveview.WriteQueued(e.stdout, held)
			return nil
		},
	}
	registerStoreFlags(cmd, f, e)
	cmd.Flags().StringVar(&f.conversation, "conversation", "", "the conversation (default: every conversation with pending calls)")
	cmd.Flags().BoolVar(&queued, "queued", false, "also list the calls held in the tools' queues by a limit (SPEC §19: read from the tools' states, which the admin role may read, not the approver's or answerer's)")
	return cmd
}
