package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/agentmetrics"
	"github.com/offload-dev/offload/pkg/agent/liveview"
	"github.com/offload-dev/offload/pkg/agentproc"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

func newResumeCmd(e env) *cobra.Command {
	f := &runFlags{resume: &session.Answers{}}
	cmd := &cobra.Command{
		Use:   "resume --conversation ID [flags] [PROMPT]",
		Short: "Continue a paused conversation with the decisions and answers that arrived",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErr("resume takes at most one PROMPT argument")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.conversation == "" {
				return usageErr("resume needs --conversation ID")
			}
			if err := applySpec(cmd.Flags(), f); err != nil {
				return err
			}
			prompt := ""
			if len(args) == 1 {
				prompt = args[0]
			}
			return runAgent(cmd.Context(), e, f, prompt)
		},
	}
	registerRunFlags(cmd, f, e)
	fl := cmd.Flags()
	fl.StringArrayVar(&f.resume.Approve, "approve-task", nil, "approve the pending call with this task ID (repeatable)")
	fl.StringArrayVar(&f.resume.Deny, "deny-task", nil, "deny the pending call with this task ID, TASK or TASK=MESSAGE (repeatable)")
	fl.StringArrayVar(&f.resume.Results, "result", nil, "answer the pending external call with this task ID, TASK=JSON, JSON an Answer such as {\"content\":\"42\"} (repeatable)")
	return cmd
}

// runDurable runs the agent on a stored conversation (SPEC §5.5): claim
// it (or a new one), continue it with what arrived when --conversation or
// resume says so, save it at every step and at the end, and stop when the
// lease is lost.
func runDurable(ctx context.Context, e env, f *runFlags, cfg agent.Config, rem *conn, am *metrics.Agent, out *liveview.Printer, opts *agent.RunOptions, prompt string) error {
	if f.conversation != "" {
		out.Conversation(f.conversation)
	}
	sess, err := openSession(ctx, e, f, rem)
	if err != nil {
		return out.Failed(err)
	}
	defer sess.Close()
	out.Conversation(sess.ID())
	out.Resolve = resolveCommands(f, rem.embedded, sess.ID())
	out.ResumeHint = resumeHint(f, rem.embedded, sess.ID())
	if f.conversation != "" {
		if err := continueSession(ctx, e, f, sess, prompt, opts, out); err != nil {
			return err
		}
	}
	if f.approve == "wait" {
		// Timed like the inline handlers: offload_approval_wait_seconds
		// counts the approvals decided while the run waits.
		cfg.Capabilities = append(cfg.Capabilities,
			agent.HandleDeferredToolCalls(agentmetrics.TimeApprovals(am, sess.AwaitDecisionsHandler(f.wait, e.suspend))))
	}
	// Non-blocking calls (SPEC §12): with --approve background every
	// approval and external call, else those of tools whose metadata says
	// deferred: background; their decisions are read live.
	cfg.Capabilities = append(cfg.Capabilities, sess.NonBlockingCalls(f.approve == "background"))
	a, err := agent.New(cfg)
	if err != nil {
		return usageErr("%v", err)
	}
	res, err := sess.Run(ctx, a, prompt, opts)
	if ns := (*session.NotSavedError)(nil); errors.As(err, &ns) {
		return out.FinishWith(res, err)
	}
	return out.Finish(res, err)
}

// openSession claims the conversation of --conversation (or a new one)
// in the JetStream store and loads it; its approvals' timeouts are
// scheduled with their announcements (agentproc.Process.Announcer).
func openSession(ctx context.Context, e env, f *runFlags, rem *conn) (*session.Session, error) {
	def, err := agentproc.SpecApproval(f.agentSpec)
	if err != nil {
		return nil, usageErr("--spec: %v", err)
	}
	host, _ := os.Hostname()
	sess, warn, err := rem.proc.OpenSession(ctx, agentproc.SessionOptions{ID: f.conversation, Holder: fmt.Sprintf("agent %s pid %d", host, os.Getpid()),
		Approval: def, Tenant: f.tenant})
	if warn != nil {
		fmt.Fprintf(e.stderr, "agent: %v; a paused call waits for a decision (or for agent serve's timers)\n", warn)
	}
	switch {
	case errors.Is(err, conversation.ErrNotFound):
		return nil, &exitError{Code: exitFailed, Err: fmt.Errorf("conversation %s is unknown", f.conversation)}
	case errors.Is(err, conversation.ErrClaimed):
		return nil, &exitError{Code: exitFailed, Err: fmt.Errorf("conflict: %w", err)}
	case err != nil:
		return nil, err
	}
	return sess, nil
}

// continueSession records what arrived for a stored conversation (from
// the streams, then from resume's flags) and, once every pending deferred
// call has its answer, sets the run's options to continue it. Otherwise
// it ends the command: exit 3 (paused still), or 2 when a prompt was given.
func continueSession(ctx context.Context, e env, f *runFlags, sess *session.Session, prompt string, opts *agent.RunOptions, out *liveview.Printer) error {
	var given []session.Given
	var flags []string
	if f.resume != nil {
		var err error
		if given, flags, err = f.resume.Given(); err != nil {
			return out.Failed(usageErr("%v", err))
		}
	}
	co := session.ContinueOptions{Given: given, Prompt: prompt, Suspend: e.suspend,
		OnDuplicate: func(i int, g session.Given, re *conversation.RefusedError) {
			fmt.Fprintf(e.stderr, "agent: %s %s ignored: %v\n", flags[i], g.TaskID, re.Err)
		}}
	if f.approve == "wait" {
		co.Wait = f.wait
	}
	ro, err := sess.Continue(ctx, co)
	var (
		ge *session.GivenError
		pe *session.PendingError
		re *conversation.RefusedError
	)
	switch {
	case err == nil:
		opts.History, opts.DeferredResults, opts.Background = ro.History, ro.DeferredResults, ro.Background
		return nil
	case errors.As(err, &ge) && errors.Is(err, protocol.ErrInvalidID):
		return out.Failed(usageErr("%s %s: %v", flags[ge.Index], ge.Given.TaskID, ge.Err))
	case errors.As(err, &ge) && errors.As(err, &re) && (re.Reason == conversation.ReasonMalformed || re.Reason == conversation.ReasonOversize):
		return out.Failed(usageErr("%s %s: %v", flags[ge.Index], ge.Given.TaskID, re.Err))
	case errors.As(err, &ge) && errors.As(err, &re):
		return out.Failed(&exitError{Code: exitFailed, Err: fmt.Errorf("%s %s: %w", flags[ge.Index], ge.Given.TaskID, re.Err)})
	case errors.As(err, &ge):
		return out.Failed(ge.Err)
	case errors.As(err, &pe) && prompt != "":
		return out.Failed(usageErr("conversation %s has %d pending calls: resolve them before giving a new prompt (the prompt was not recorded)", sess.ID(), len(pe.Waiting)))
	case errors.As(err, &pe):
		return out.Paused(sess.Unresolved())
	case errors.Is(err, session.ErrNothingToResume):
		return out.Failed(usageErr("conversation %s: nothing is pending and it has ended: give a PROMPT to continue it", sess.ID()))
	}
	return out.Failed(err)
}
