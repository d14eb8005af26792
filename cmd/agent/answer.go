package main

import (
	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/conversation"
)

// newAnswerCmd is agent answer (SPEC §6.1): publish the answer of an
// external call on <prefix>.answer.<conv>.<task>.
func newAnswerCmd(e env) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "answer --conversation ID TASK JSON",
		Short: `Answer a pending external call with an Answer such as {"content":"42"}`,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return publishArrival(cmd, e, f, conversation.ArrivalAnswer, args[0], []byte(args[1]))
		},
	}
	registerStoreFlags(cmd, f, e)
	cmd.Flags().StringVar(&f.conversation, "conversation", "", "the conversation")
	return cmd
}
