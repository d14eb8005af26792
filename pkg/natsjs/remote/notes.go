package remote

import (
	"fmt"
	"strings"
)

// ClashNote names the registry entries that clash with the agent's
// policies, and how, for a process's start-up diagnostics.
func ClashNote(clashes []Clash) string {
	return "registry entries clash with the agent's policy, which applies: " + joinAll(clashes)
}

// SkippedNote names the registry entries skipped and why, for the
// messages about the tools offered: "" when none was.
func SkippedNote(skipped []SkippedEntry) string {
	if len(skipped) == 0 {
		return ""
	}
	return "; registry entries skipped: " + joinAll(skipped)
}

// joinAll joins the strings of xs with commas.
func joinAll[T fmt.Stringer](xs []T) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = x.String()
	}
	return strings.Join(parts, ", ")
}
