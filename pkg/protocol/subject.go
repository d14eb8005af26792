package protocol

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/offload-dev/offload/pkg/tool"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "tools"

// PrefixPattern is the pattern a subject prefix must match: a single subject
// token that is also usable in stream and KV bucket names.
const PrefixPattern = `^[A-Za-z0-9_-]{1,32}$`

var prefixRE = regexp.MustCompile(PrefixPattern)

// ErrInvalidPrefix is wrapped by errors about a prefix that does not match
// [PrefixPattern].
var ErrInvalidPrefix = errors.New("protocol: invalid subject prefix")

// ErrInvalidSubject is wrapped by errors of [Subjects.Parse].
var ErrInvalidSubject = errors.New("protocol: invalid subject")

// ValidatePrefix returns an error wrapping [ErrInvalidPrefix] when prefix does
// not match [PrefixPattern].
func ValidatePrefix(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("%w: %q must match %s", ErrInvalidPrefix, prefix, PrefixPattern)
	}
	return nil
}

// Kind is the kind of a subject, named by its second token.
type Kind int

// The subject kinds of SPEC §5.1. The subjects a worker writes or reads
// for a task (results, cancels, progress) end with the task's tool, so
// that a worker's permissions can be limited to its own tools' subjects
// (SPEC §9); those people write or read (approvals, decisions, answers)
// name a conversation's task only.
const (
	// KindTask is <prefix>.task.<tool>.
	KindTask Kind = iota + 1
	// KindResult is <prefix>.result.<conversation>.<task>.<tool>.
	KindResult
	// KindApproval is <prefix>.approval.<conversation>.<task>.
	KindApproval
	// KindDecision is <prefix>.decision.<conversation>.<task>.
	KindDecision
	// KindCancel is <prefix>.cancel.<conversation>.<task>.<tool>.
	KindCancel
	// KindProgress is <prefix>.progress.<conversation>.<task>.<tool>.
	KindProgress
	// KindAnswer is <prefix>.answer.<conversation>.<task>: the result of an
	// external call, published by a person or a UI. Only workers publish on
	// <prefix>.result.>, so an answerer cannot forge a worker's result.
	KindAnswer
	// KindDead is <prefix>.dead.<conversation>.<task>.<tool>: a task whose
	// deliveries were exhausted, kept by its worker as it was delivered
	// (a dead letter, SPEC §19) for an operator to replay or discard.
	KindDead
)

var kindTokens = [...]string{
	KindTask:     "task",
	KindResult:   "result",
	KindApproval: "approval",
	KindDecision: "decision",
	KindCancel:   "cancel",
	KindProgress: "progress",
	KindAnswer:   "answer",
	KindDead:     "dead",
}

// String returns the subject token of the kind ("task", "result", …), or
// "Kind(n)" for an unknown kind.
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindTokens) {
		return kindTokens[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// HasTool reports whether subjects of kind k end with the task's tool:
// results, cancels, progress reports and dead letters.
func (k Kind) HasTool() bool {
	return k == KindResult || k == KindCancel || k == KindProgress || k == KindDead
}

func kindOf(token string) (Kind, bool) {
	for k, s := range kindTokens {
		if k > 0 && s == token {
			return Kind(k), true
		}
	}
	return 0, false
}

// Subjects builds and parses the subjects of one prefix. The zero value uses
// [DefaultPrefix]. Builders do not validate their arguments: pass tool names
// that satisfy [tool.ValidateName] and IDs from [NewID].
type Subjects struct {
	// Prefix is the first subject token. Defaults to [DefaultPrefix].
	Prefix string
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

func (s Subjects) join(k Kind, conv, task string) string {
	return s.prefix() + "." + k.String() + "." + conv + "." + task
}

// Task returns <prefix>.task.<tool>.
func (s Subjects) Task(toolName string) string { return s.prefix() + ".task." + toolName }

// Result returns <prefix>.result.<conv>.<task>.<tool>.
func (s Subjects) Result(conv, task, toolName string) string {
	return s.join(KindResult, conv, task) + "." + toolName
}

// Approval returns <prefix>.approval.<conv>.<task>.
func (s Subjects) Approval(conv, task string) string { return s.join(KindApproval, conv, task) }

// Decision returns <prefix>.decision.<conv>.<task>.
func (s Subjects) Decision(conv, task string) string { return s.join(KindDecision, conv, task) }

// Cancel returns <prefix>.cancel.<conv>.<task>.<tool>.
func (s Subjects) Cancel(conv, task, toolName string) string {
	return s.join(KindCancel, conv, task) + "." + toolName
}

// Progress returns <prefix>.progress.<conv>.<task>.<tool>.
func (s Subjects) Progress(conv, task, toolName string) string {
	return s.join(KindProgress, conv, task) + "." + toolName
}

// Answer returns <prefix>.answer.<conv>.<task>.
func (s Subjects) Answer(conv, task string) string { return s.join(KindAnswer, conv, task) }

// Dead returns <prefix>.dead.<conv>.<task>.<tool>.
func (s Subjects) Dead(conv, task, toolName string) string {
	return s.join(KindDead, conv, task) + "." + toolName
}

// All returns the wildcard subject of every message of a kind:
// <prefix>.task.> or <prefix>.<kind>.> (for example tools.result.>).
func (s Subjects) All(k Kind) string { return s.prefix() + "." + k.String() + ".>" }

// OfTool returns the wildcard subject of the messages of kind k about
// the tasks of one tool: <prefix>.task.<tool> for [KindTask],
// <prefix>.<kind>.*.*.<tool> for the kinds whose subjects end with the
// tool ([Kind.HasTool]), and "" for the others. These are the subjects a
// worker serving the tool is allowed (deploy/nats/auth.conf).
func (s Subjects) OfTool(k Kind, toolName string) string {
	switch {
	case k == KindTask:
		return s.Task(toolName)
	case k.HasTool():
		return s.prefix() + "." + k.String() + ".*.*." + toolName
	}
	return ""
}

// ResultsFor returns <prefix>.result.<conv>.>, the results of one
// conversation.
func (s Subjects) ResultsFor(conv string) string { return s.join(KindResult, conv, ">") }

// AnswersFor returns <prefix>.answer.<conv>.*.
func (s Subjects) AnswersFor(conv string) string { return s.join(KindAnswer, conv, "*") }

// ApprovalsFor returns <prefix>.approval.<conv>.*.
func (s Subjects) ApprovalsFor(conv string) string { return s.join(KindApproval, conv, "*") }

// DecisionsFor returns <prefix>.decision.<conv>.*.
func (s Subjects) DecisionsFor(conv string) string { return s.join(KindDecision, conv, "*") }

// CancelsFor returns <prefix>.cancel.<conv>.>.
func (s Subjects) CancelsFor(conv string) string { return s.join(KindCancel, conv, ">") }

// ProgressFor returns <prefix>.progress.<conv>.>.
func (s Subjects) ProgressFor(conv string) string { return s.join(KindProgress, conv, ">") }

// Parse splits a concrete subject of this prefix. For [KindTask] it returns
// the tool name (conv and task empty); for results, cancels and progress
// reports the conversation and task IDs and the tool; for the other kinds
// the conversation and task IDs (tool empty). IDs must be canonical ULIDs
// and tool names must satisfy [tool.ValidateName]. Errors wrap
// [ErrInvalidSubject].
func (s Subjects) Parse(subject string) (kind Kind, conv, task, toolName string, err error) {
	bad := func(format string, args ...any) (Kind, string, string, string, error) {
		return 0, "", "", "", fmt.Errorf("%w %q: %s", ErrInvalidSubject, subject, fmt.Sprintf(format, args...))
	}
	rest, ok := strings.CutPrefix(subject, s.prefix()+".")
	if !ok {
		return bad("prefix is not %q", s.prefix())
	}
	tokens := strings.Split(rest, ".")
	k, ok := kindOf(tokens[0])
	if !ok {
		return bad("unknown kind %q", tokens[0])
	}
	if k == KindTask {
		if len(tokens) != 2 {
			return bad("want %s.task.<tool>", s.prefix())
		}
		if err := tool.ValidateName(tokens[1]); err != nil {
			return bad("%v", err)
		}
		return k, "", "", tokens[1], nil
	}
	switch {
	case k.HasTool() && len(tokens) != 4:
		return bad("want %s.%s.<conversation>.<task>.<tool>", s.prefix(), k)
	case !k.HasTool() && len(tokens) != 3:
		return bad("want %s.%s.<conversation>.<task>", s.prefix(), k)
	}
	if _, err := ParseID(tokens[1]); err != nil {
		return bad("conversation: %v", err)
	}
	if _, err := ParseID(tokens[2]); err != nil {
		return bad("task: %v", err)
	}
	if k.HasTool() {
		if err := tool.ValidateName(tokens[3]); err != nil {
			return bad("tool: %v", err)
		}
		return k, tokens[1], tokens[2], tokens[3], nil
	}
	return k, tokens[1], tokens[2], "", nil
}
