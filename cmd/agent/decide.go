package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
)

// decideFlags are the flags of approve, deny and answer.
type decideFlags struct {
	message string
	args    string
	by      string
}

// newDecideCmd is agent approve or agent deny (SPEC §6.1): publish a
// decision on <prefix>.decision.<conv>.<task>, as a person would with
// nats pub.
func newDecideCmd(e env, approve bool) *cobra.Command {
	f := &runFlags{}
	df := &decideFlags{}
	verb, short := "deny", "Deny a pending call (published as a decision; resume continues the conversation)"
	if approve {
		verb, short = "approve", "Approve a pending call (published as a decision; resume continues the conversation)"
	}
	cmd := &cobra.Command{
		Use:   verb + " --conversation ID TASK",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := protocol.Decision{Approved: approve, By: df.by, Channel: protocol.ChannelCLI}
			if approve {
				if df.message != "" {
					return usageErr("--message is a denial's: drop it to approve")
				}
				if df.args != "" {
					var obj map[string]any
					if err := json.Unmarshal([]byte(df.args), &obj); err != nil || obj == nil {
						return usageErr("--args must be a JSON object")
					}
					d.OverrideArgs = json.RawMessage(df.args)
				}
			} else {
				if df.args != "" {
					return usageErr("--args replaces an approved call's arguments: use it with approve")
				}
				d.Message = df.message
			}
			data, err := json.Marshal(d)
			if err != nil {
				return err
			}
			return publishArrival(cmd, e, f, conversation.ArrivalDecision, args[0], data)
		},
	}
	registerStoreFlags(cmd, f, e)
	fl := cmd.Flags()
	fl.StringVar(&f.conversation, "conversation", "", "the conversation")
	if !approve {
		fl.StringVar(&df.message, "message", "", "why, told to the model")
	}
	if approve {
		fl.StringVar(&df.args, "args", "", "JSON object replacing the call's arguments")
	}
	fl.StringVar(&df.by, "by", "", "who decides (recorded for audit)")
	return cmd
}

// publishArrival checks data against the conversation's pending record
// like the run that reads it will (exit 1 when the task is not pending
// there, 2 when data is malformed) and publishes it on its subject, first
// wins (exit 1 when the task already has its decision or answer), through
// the pending desk (a decision bound to the call's arguments as pending,
// SPEC §12). It reads the pending record only, never the conversation's
// state: the approver and answerer roles run it.
func publishArrival(cmd *cobra.Command, e env, f *runFlags, kind conversation.ArrivalKind, task string, data []byte) error {
	if f.conversation == "" {
		return usageErr("%s needs --conversation ID", cmd.Name())
	}
	if err := checkConversationFlag(f.conversation); err != nil {
		return err
	}
	if _, err := protocol.ParseID(task); err != nil {
		return usageErr("TASK %s: %v", task, err)
	}
	f.role = "approver"
	if kind == conversation.ArrivalAnswer {
		f.role = "answerer"
	}
	ctx := cmd.Context()
	o, err := openPeople(ctx, e, f)
	if err != nil {
		return err
	}
	defer o.c.close()
	var subject string
	if kind == conversation.ArrivalDecision {
		var d protocol.Decision
		if err := json.Unmarshal(data, &d); err != nil {
			return usageErr("%v", err)
		}
		subject, err = o.desk.Decide(ctx, f.conversation, task, d)
	} else {
		subject, err = o.desk.Answer(ctx, f.conversation, task, data)
	}
	var re *conversation.RefusedError
	var le *natsjs.LimitError
	switch {
	case err == nil:
	case errors.As(err, &re) && (re.Reason == conversation.ReasonMalformed || re.Reason == conversation.ReasonOversize):
		return usageErr("%v", re.Err)
	case errors.As(err, &re) && re.Reason == conversation.ReasonDuplicate:
		return &exitError{Code: exitFailed, Err: fmt.Errorf("task %s is not pending in conversation %s: it was already answered", task, f.conversation)}
	case errors.As(err, &re) && re.Reason == conversation.ReasonUnknownTask:
		return &exitError{Code: exitFailed, Err: fmt.Errorf("task %s is not pending in conversation %s", task, f.conversation)}
	case errors.As(err, &re) && re.Reason == conversation.ReasonWrongKind:
		return &exitError{Code: exitFailed, Err: fmt.Errorf("task %s is not pending in conversation %s as a call to %s: %w", task, f.conversation, cmd.Name(), re.Err)}
	case errors.As(err, &re):
		return &exitError{Code: exitFailed, Err: fmt.Errorf("task %s: %w", task, err)}
	case errors.As(err, &le):
		return &exitError{Code: exitFailed, Err: fmt.Errorf("%s of task %s not recorded: the stream of %s refused it at its %s limit (%s)", kind, task, subject, le.Limit, le.Description)}
	default:
		return &exitError{Code: exitFailed, Err: err}
	}
	fmt.Fprintf(e.stderr, "%s %s recorded on %s; once nothing else is pending, continue with: %s (and the run's --spec, if it had one)\n", kind, task, subject, resumeHint(f, o.c.embedded, f.conversation))
	return nil
}

// checkConversationFlag checks --conversation: a ULID (exit 2).
func checkConversationFlag(id string) error {
	if _, err := protocol.ParseID(id); err != nil {
		return usageErr("--conversation: %v", err)
	}
	return nil
}
