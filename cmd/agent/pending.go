package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
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
			o, release, err := storeCmd{e: e, f: f}.open(ctx)
			if err != nil {
				return err
			}
			defer release()
			ids := []string{f.conversation}
			if f.conversation == "" {
				if ids, err = o.store.List(ctx); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
			}
			for _, id := range ids {
				st, err := o.load(ctx, id)
				if err != nil {
					return err
				}
				pending := st.Unresolved()
				skip := make(map[string]bool)
				if st.Pending != nil {
					for _, t := range st.Pending.Tasks {
						skip[t.TaskID] = true
					}
				}
				pending = append(pending, o.liveApprovals(ctx, f, id, skip)...)
				if len(pending) == 0 {
					continue
				}
				if f.conversation == "" {
					fmt.Fprintf(e.stdout, "# conversation %s\n", id)
				}
				writePending(e.stdout, pending, resolveCommands(f, o.c.embedded, id))
			}
			return nil
		},
	}
	registerStoreFlags(cmd, f, e)
	cmd.Flags().StringVar(&f.conversation, "conversation", "", "the conversation (default: every stored conversation with pending calls)")
	return cmd
}

// newHistoryCmd is agent history (SPEC §6.1): the stored history as JSON.
func newHistoryCmd(e env) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "history --conversation ID",
		Short: "Print a conversation's stored history as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.conversation == "" {
				return usageErr("history needs --conversation ID")
			}
			ctx := cmd.Context()
			_, st, release, err := storeCmd{e: e, f: f}.openConversation(ctx)
			if err != nil {
				return err
			}
			defer release()
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st.History)
		},
	}
	registerStoreFlags(cmd, f, e)
	cmd.Flags().StringVar(&f.conversation, "conversation", "", "the conversation")
	return cmd
}

// liveApprovals returns the approvals a live run of conversation conv
// waits for (--approve wait): announced on <prefix>.approval.<conv>.<task>,
// not resolved, with no decision stored yet, and not among skip (the
// stored pending record's calls). They are in no stored pending record
// until the run pauses. Best effort: a role that cannot read the approvals
// stream (only admin and approver can) sees none of them.
func (o *openedStore) liveApprovals(ctx context.Context, f *runFlags, conv string, skip map[string]bool) []deferred.PendingTask {
	names := natsjs.NamesFor(f.prefix)
	subj := protocol.Subjects{Prefix: f.prefix}
	approvals, err := o.js.Stream(ctx, names.Approvals)
	if err != nil {
		return nil
	}
	info, err := approvals.Info(ctx, jetstream.WithSubjectFilter(subj.ApprovalsFor(conv)))
	if err != nil || len(info.State.Subjects) == 0 {
		return nil
	}
	decisions, err := o.js.Stream(ctx, names.Decisions)
	if err != nil {
		return nil
	}
	var out []deferred.PendingTask
	for _, subject := range slices.Sorted(maps.Keys(info.State.Subjects)) { // task IDs sort by time
		m, err := approvals.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			continue
		}
		var r protocol.Resolution
		if json.Unmarshal(m.Data, &r) == nil && r.Resolved != "" {
			continue
		}
		a, err := protocol.DecodeApproval(m.Data, nil)
		if err != nil || a.ConversationID != conv || subject != subj.Approval(conv, a.TaskID) || skip[a.TaskID] {
			continue
		}
		if _, err := decisions.GetLastMsgForSubject(ctx, subj.Decision(conv, a.TaskID)); err == nil {
			continue // decided; the run has not read it yet
		}
		out = append(out, deferred.PendingTask{TaskID: a.TaskID, ToolCallID: a.ToolCallID, Kind: deferred.KindApproval, Tool: a.Tool, Args: a.Args, Metadata: a.Metadata})
	}
	return out
}
