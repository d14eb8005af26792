// Command mutate is the mutation check of the deferred-tool code (make
// mutate): it applies, one at a time, the one-line mutations listed in
// mutations.yaml, runs the tests of the listed packages against each, and
// reports the mutations no test caught (the survivors). It exits non-zero
// when a mutation survives, when its text no longer matches the code
// exactly once (a stale entry), or when a mutated tree does not build.
//
// Mutations are applied through `go test -overlay`: the source files are
// never written, so an interrupted run leaves the tree as it was and
// mutations may run side by side. Each mutation names a file, a literal
// text that must occur exactly once in it, on one line, and the text that
// replaces it:
//
//   - name: a denial is recorded as a success
//     file: pkg/agent/deferred.go
//     find: "Outcome: message.OutcomeDenied}"
//     replace: "Outcome: message.OutcomeSuccess}"
//
// Usage, from the module root:
//
//	go run ./internal/mutate [-list internal/mutate/mutations.yaml] [-run REGEXP] [-parallel N] [-v]
package main
