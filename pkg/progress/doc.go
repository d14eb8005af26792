// Package progress carries a progress reporter through a context, so that a
// long-running tool can report how far it got without knowing who listens.
//
// A worker puts a [Reporter] in the context it runs a tool with
// ([WithReporter]); the tool calls [Report]. Without a reporter, [Report]
// does nothing, so tools stay usable in-process and in tests.
//
// Progress is informational: it is shown to people and UIs (the
// tools.progress.<conversation>.<task>.<tool> subject), never to the model.
package progress
