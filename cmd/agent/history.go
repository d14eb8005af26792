package main

import (
	"encoding/json"

	"github.com/spf13/cobra"
)

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
			o, st, err := openConversation(ctx, e, f)
			if err != nil {
				return err
			}
			defer o.c.close()
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st.History)
		},
	}
	registerStoreFlags(cmd, f, e)
	cmd.Flags().StringVar(&f.conversation, "conversation", "", "the conversation")
	return cmd
}
