package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/offload-dev/offload/pkg/agent"
	"github.com/offload-dev/offload/pkg/agent/agentmetrics"
	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/deferred"
	"github.com/offload-dev/offload/pkg/metrics"
	"github.com/offload-dev/offload/pkg/natsjs"
	"github.com/offload-dev/offload/pkg/protocol"
	"github.com/offload-dev/offload/pkg/session"
)

// resumeFlags are the answers given on resume's command line.
type resumeFlags struct {
	approve []string // TASK
	deny    []string // TASK[=MSG]
	results []string // TASK=JSON
}

func newResumeCmd(e env) *cobra.Command {
	f := &runFlags{resume: &resumeFlags{}}
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
	fl.StringArrayVar(&f.resume.approve, "approve-task", nil, "approve the pending call with this task ID (repeatable)")
	fl.StringArrayVar(&f.resume.deny, "deny-task", nil, "deny the pending call with this task ID, TASK or TASK=MESSAGE (repeatable)")
	fl.StringArrayVar(&f.resume.results, "result", nil, "answer the pending external call with this task ID, TASK=JSON, JSON an Answer such as {\"content\":\"42\"} (repeatable)")
	return cmd
}

// runDurable runs the agent on a stored conversation (SPEC §5.5): claim
// it (or a new one), continue it with what arrived when --conversation or
// resume says so, save it at every step and at the end, and stop when the
// lease is lost.
func runDurable(ctx context.Context, e env, f *runFlags, cfg agent.Config, rem *remoteConn, am *metrics.Agent, logger *slog.Logger, out *printer, opts *agent.RunOptions, prompt string) error {
	if f.conversation != "" {
		out.conversation(f.conversation)
	}
	sess, err := openSession(ctx, f, rem, am, logger)
	if err != nil {
		return out.failed(err)
	}
	defer sess.Close()
	out.conversation(sess.ID())
	out.resolve = resolveCommands(f, rem.embedded, sess.ID())
	out.resumeHint = resumeHint(f, rem.embedded, sess.ID())
	opts.ConversationID = sess.ID()
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
	// Last: it saves the request the capabilities before it prepared.
	cfg.Capabilities = append(cfg.Capabilities, sess.Checkpointer())
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-sess.Lost():
			cancel(conversation.ErrLeaseLost)
		case <-runCtx.Done():
		}
	}()
	a, err := agent.New(cfg)
	if err != nil {
		return usageErr("%v", err)
	}
	res, runErr := a.Run(runCtx, prompt, opts)
	saveFor := 15 * time.Second
	if errors.Is(runErr, natsjs.ErrServerLost) || !rem.nc.IsConnected() {
		// The server is gone: a save can only wait out its timeout.
		saveFor = 2 * time.Second
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), saveFor)
	defer fcancel()
	if errors.Is(context.Cause(runCtx), conversation.ErrLeaseLost) {
		// Another process may hold the conversation now: nothing is saved
		// (Finish would refuse), and the run did not end by itself.
		return out.finishWith(res, fmt.Errorf("conversation %s: %w (another process may have claimed it); nothing more was saved", sess.ID(), conversation.ErrLeaseLost))
	}
	if err := sess.Finish(fctx, res, runErr); err != nil {
		logger.Error("conversation not saved", slog.Any("error", err))
		if runErr == nil {
			return out.finishWith(res, fmt.Errorf("conversation %s not saved: %w", sess.ID(), err))
		}
	}
	return out.finish(res, runErr)
}

// openSession claims the conversation of --conversation (or a new one)
// in the JetStream store and loads it.
func openSession(ctx context.Context, f *runFlags, rem *remoteConn, am *metrics.Agent, log *slog.Logger) (*session.Session, error) {
	convs, err := openConversations(ctx, rem.nc, f, am, log)
	if err != nil {
		return nil, err
	}
	id, create := f.conversation, f.conversation == ""
	if create {
		id = protocol.NewID()
	}
	host, _ := os.Hostname()
	sess, err := session.Open(ctx, session.Config{
		Store:      convs.Store,
		Inbox:      convs.Inbox,
		Announcer:  convs.Announcer,
		Canceller:  rem.client,
		Attacher:   rem.client,
		Holder:     fmt.Sprintf("agent %s pid %d", host, os.Getpid()),
		MaxPayload: int(rem.nc.MaxPayload()),
		Logger:     log,
	}, id, create)
	switch {
	case errors.Is(err, conversation.ErrNotFound):
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("conversation %s is unknown", id)}
	case errors.Is(err, conversation.ErrClaimed):
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("conflict: %w", err)}
	case err != nil:
		return nil, err
	}
	return sess, nil
}

// continueSession records what arrived for a stored conversation (from
// the streams, then from resume's flags) and, once every pending deferred
// call has its answer, sets the run's options to continue it. Otherwise
// it ends the command: exit 3 (paused still), or 2 when a prompt was given.
func continueSession(ctx context.Context, e env, f *runFlags, sess *session.Session, prompt string, opts *agent.RunOptions, out *printer) error {
	if _, err := sess.Collect(ctx); err != nil {
		return out.failed(fmt.Errorf("read decisions and answers: %w", err))
	}
	if err := admitFlags(sess, f.resume, out); err != nil {
		_ = sess.Save(ctx) // what the flags before it gave stays recorded
		return out.failed(err)
	}
	if err := sess.Save(ctx); err != nil {
		return out.failed(err)
	}
	if len(sess.Unresolved(deferred.KindApproval, deferred.KindExternal)) > 0 && f.approve == "wait" {
		if err := sess.AwaitArrivals(ctx, f.wait, e.suspend); err != nil {
			return out.failed(err)
		}
	}
	if w := sess.Unresolved(deferred.KindApproval, deferred.KindExternal); len(w) > 0 {
		if prompt != "" {
			return out.failed(usageErr("conversation %s has %d pending calls: resolve them before giving a new prompt (the prompt was not recorded)", sess.ID(), len(w)))
		}
		return out.paused(sess.Unresolved())
	}
	ro, err := sess.Prepare(prompt)
	if errors.Is(err, session.ErrNothingToResume) {
		return out.failed(usageErr("conversation %s: nothing is pending and it has ended: give a PROMPT to continue it", sess.ID()))
	}
	if err != nil {
		return out.failed(err)
	}
	opts.History, opts.DeferredResults, opts.Background = ro.History, ro.DeferredResults, ro.Background
	return nil
}

// admitFlags records the answers given on the command line, each checked
// like a message from the wire: an unknown task or one of another kind is
// an error (exit 1), a malformed answer a usage error (exit 2); one for a
// task already answered is ignored with a warning (first wins).
func admitFlags(sess *session.Session, rf *resumeFlags, out *printer) error {
	if rf == nil {
		return nil
	}
	type given struct {
		flag, task string
		kind       conversation.ArrivalKind
		data       []byte
	}
	var all []given
	for _, t := range rf.approve {
		all = append(all, given{"--approve-task", t, conversation.ArrivalDecision, []byte(`{"approved":true}`)})
	}
	for _, v := range rf.deny {
		task, msg, _ := strings.Cut(v, "=")
		data, _ := json.Marshal(protocol.Decision{Approved: false, Message: msg})
		all = append(all, given{"--deny-task", task, conversation.ArrivalDecision, data})
	}
	for _, v := range rf.results {
		task, js, ok := strings.Cut(v, "=")
		if !ok {
			return usageErr("--result %s: want TASK=JSON", v)
		}
		all = append(all, given{"--result", task, conversation.ArrivalAnswer, []byte(js)})
	}
	for _, g := range all {
		if _, err := protocol.ParseID(g.task); err != nil {
			return usageErr("%s %s: %v", g.flag, g.task, err)
		}
		err := sess.Admit(g.kind, g.task, g.data)
		var re *conversation.RefusedError
		switch {
		case err == nil:
		case errors.As(err, &re) && re.Reason == conversation.ReasonDuplicate:
			fmt.Fprintf(out.e.stderr, "agent: %s %s ignored: %v\n", g.flag, g.task, re.Err)
		case errors.As(err, &re) && (re.Reason == conversation.ReasonMalformed || re.Reason == conversation.ReasonOversize):
			return usageErr("%s %s: %v", g.flag, g.task, re.Err)
		case errors.As(err, &re):
			return &exitError{code: exitFailed, err: fmt.Errorf("%s %s: %v", g.flag, g.task, re.Err)}
		default:
			return err
		}
	}
	return nil
}
