package protocol

import (
	"errors"
	"testing"
)

func TestSubjectsBuild(t *testing.T) {
	t.Parallel()
	var s Subjects // zero value: default prefix
	conv, task := "01J00000000000000000000000", "01J00000000000000000000001"
	for _, tc := range []struct{ got, want string }{
		{s.Task("search"), "tools.task.search"},
		{s.Result(conv, task, "shell"), "tools.result." + conv + "." + task + ".shell"},
		{s.Approval(conv, task), "tools.approval." + conv + "." + task},
		{s.Decision(conv, task), "tools.decision." + conv + "." + task},
		{s.Cancel(conv, task, "shell"), "tools.cancel." + conv + "." + task + ".shell"},
		{s.Progress(conv, task, "shell"), "tools.progress." + conv + "." + task + ".shell"},
		{s.Answer(conv, task), "tools.answer." + conv + "." + task},
		{s.AnswersFor(conv), "tools.answer." + conv + ".*"},
		{s.All(KindAnswer), "tools.answer.>"},
		{s.All(KindTask), "tools.task.>"},
		{s.All(KindResult), "tools.result.>"},
		{s.ResultsFor(conv), "tools.result." + conv + ".>"},
		{s.ApprovalsFor(conv), "tools.approval." + conv + ".*"},
		{s.DecisionsFor(conv), "tools.decision." + conv + ".*"},
		{s.CancelsFor(conv), "tools.cancel." + conv + ".>"},
		{s.ProgressFor(conv), "tools.progress." + conv + ".>"},
		{s.OfTool(KindTask, "shell"), "tools.task.shell"},
		{s.OfTool(KindResult, "shell"), "tools.result.*.*.shell"},
		{s.OfTool(KindCancel, "shell"), "tools.cancel.*.*.shell"},
		{s.OfTool(KindProgress, "shell"), "tools.progress.*.*.shell"},
		{s.OfTool(KindDecision, "shell"), ""},
		{Subjects{Prefix: "acme"}.Task("x"), "acme.task.x"},
		{Subjects{Prefix: "acme"}.Result(conv, task, "x"), "acme.result." + conv + "." + task + ".x"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestSubjectsParseRoundTrip(t *testing.T) {
	t.Parallel()
	s := Subjects{Prefix: "acme"}
	conv, task := NewID(), NewID()
	for _, k := range []Kind{KindResult, KindApproval, KindDecision, KindCancel, KindProgress, KindAnswer, KindDead} {
		subject, wantTool := s.join(k, conv, task), ""
		if k.HasTool() {
			subject, wantTool = subject+".web-search_2", "web-search_2"
		}
		gk, gc, gt, gtool, err := s.Parse(subject)
		if err != nil {
			t.Fatalf("Parse(%q): %v", subject, err)
		}
		if gk != k || gc != conv || gt != task || gtool != wantTool {
			t.Errorf("Parse(%q) = %v %q %q %q", subject, gk, gc, gt, gtool)
		}
	}
	gk, gc, gt, gtool, err := s.Parse(s.Task("web-search_2"))
	if err != nil || gk != KindTask || gc != "" || gt != "" || gtool != "web-search_2" {
		t.Errorf("Parse(task) = %v %q %q %q %v", gk, gc, gt, gtool, err)
	}
}

func TestSubjectsParseErrors(t *testing.T) {
	t.Parallel()
	var s Subjects
	conv, task := NewID(), NewID()
	for _, subject := range []string{
		"",
		"tools",
		"other.task.search",
		"toolsx.task.search",
		"tools.nope.x",
		"tools.task",
		"tools.task.a.b",
		"tools.task.bad*name",
		"tools.result." + conv,
		"tools.result." + conv + "." + task, // the tool is the last token
		"tools.cancel." + conv + "." + task,
		"tools.progress." + conv + "." + task,
		"tools.result." + conv + "." + task + ".shell.extra",
		"tools.result." + conv + "." + task + ".bad*name",
		"tools.result.notanid." + task + ".shell",
		"tools.result." + conv + ".notanid.shell",
		"tools.result." + conv + ".*.shell",
		"tools.decision." + conv + "." + task + ".shell", // people's subjects name no tool
		"tools.answer." + conv + "." + task + ".shell",
	} {
		if _, _, _, _, err := s.Parse(subject); !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("Parse(%q) = %v, want ErrInvalidSubject", subject, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"tools", "acme_1", "A-b"} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q): %v", p, err)
		}
	}
	for _, p := range []string{"", "a.b", "a b", "a*", ">", "abcdefghijklmnopqrstuvwxyz0123456"} {
		if err := ValidatePrefix(p); !errors.Is(err, ErrInvalidPrefix) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidPrefix", p, err)
		}
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	if got := KindDecision.String(); got != "decision" {
		t.Errorf("got %q", got)
	}
	if got := Kind(99).String(); got != "Kind(99)" {
		t.Errorf("got %q", got)
	}
}
