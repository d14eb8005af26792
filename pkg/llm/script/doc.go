// Package script holds scripted models: [FuncModel], whose responses come
// from a Go function (pydantic-ai's FunctionModel), and [Model], which
// answers with canned turns from a Go slice ([FromTurns]) or a YAML or JSON
// file ([Load], [Parse]); the latter is the `--model script:FILE` of the
// agent command. docs/SCRIPT.md in the repository documents the file format
// for users of the command; this is the same, for Go.
//
// # Choosing a turn
//
// A scripted [Model] answers each request with one turn:
//
//  1. the first turn, in the script's order, whose [When] matches what the
//     request brings;
//  2. otherwise the next turn without When, by count: the n-th turn without
//     When answers the n-th request that no When matched, so a script
//     without When answers the n-th request with its n-th turn;
//  3. otherwise the request fails with an error wrapping
//     [llm.ErrScriptExhausted] that says how many turns the script has and
//     which request asked. It never cycles.
//
// A turn with When answers every request it matches (it is never used up);
// a turn without When answers once. What a request brings is the parts of
// the messages after the last model response of its history (the whole
// history when it has none): the prompt, the tool results, the retry
// prompts, and the follow-ups of background tasks (SPEC §4), which the
// agent sends whenever a task ends, possibly with other results. A script
// that counts depends on that timing; one whose turns say When answers by
// what it sees. The counted turns are counted per [Model], that is per
// process for the agent command (a resume starts again); When sees the
// conversation's history in every process.
//
// A turn with an error makes the request fail with an error wrapping
// [ErrScriptedFailure]. A cancelled request uses no turn.
//
// Both kinds of models stream by splitting their response: text word by
// word (each word keeping its trailing white space) and each tool call
// whole, in one [llm.Delta]; a [FuncModel] may stream with its own function
// instead ([WithStream]).
//
// # File format
//
// A script is an object (YAML, or JSON: [Load] goes by the file's
// extension, .json, .yaml or .yml, and [Parse] by its format argument;
// otherwise data starting with "{" is JSON, anything else YAML). Unknown
// keys are errors at every level. Keys, types and defaults:
//
//   - name (string): the model's name; defaults to the file name without its
//     extension for [Load], to [DefaultName] for [Parse].
//   - turns (list of turns, required, not empty).
//
// A turn ([Turn]):
//
//   - when (object, see below): the requests the turn answers; absent or
//     null, the turn is counted.
//   - text (string, default ""): the response's text, before its calls.
//   - tool_calls (list of calls, default none): called in parallel, in order.
//   - error (string, default ""): instead of a response, the request fails
//     with "scripted model failure: <error>".
//
// A turn needs text, tool_calls or both, or only an error. The finish
// reason is "tool_calls" when the turn calls tools, else "stop".
//
// A tool call ([Call]):
//
//   - tool (string, required): the tool's name, matching [tool.NamePattern].
//   - args (any JSON value, or a string; default {}): a string is sent
//     exactly as written (e.g. to send invalid JSON), anything else as its
//     JSON encoding; YAML numbers keep their text and timestamps stay
//     strings.
//   - id (string): the call's ID; defaults to call_<turn>_<i> (both counted
//     from 1), and in a turn with when to call_<turn>_<i>_<r>, where r is
//     the response's position in the conversation (1 + the responses in the
//     request's history), so that a turn answering several requests does not
//     repeat an ID. Two calls of a turn cannot share an ID.
//
// A condition ([When]) holds one or more of the keys below; all of them
// must hold, each by a part the request brings. Each takes an object, {}
// matching any part of its kind; contains is case-sensitive text the part
// must contain, tool the tool it must be of (both default to anything).
//
//   - prompt {contains}: a user prompt that is not a background follow-up
//     (its text items joined by newlines).
//   - result {tool, contains}: a tool result, whatever its outcome, as the
//     model reads it (a failed call's is {"error":"…"}).
//   - retry {tool, contains}: a retry prompt (invalid arguments, a tool's
//     ModelRetry), as the model reads it.
//   - follow_up {tool, contains}: a background follow-up; contains looks
//     into its whole text ("Background tool 'sleep' (task …)
//     completed.\nResult: …" or "… failed: …").
//
// There is no negation: put the most specific turn first.
//
// # Examples
//
// Turns by count, with text and tool calls, an ID, arguments sent as
// written, and a model failure:
//
//	name: weather
//	turns:
//	  - text: Let me check.
//	    tool_calls:
//	      - tool: get_weather
//	        args: {city: Paris}
//	      - tool: get_time
//	        args: '{"tz": "Europe/Paris"}'
//	        id: time-1
//	  - text: It is sunny in Paris.
//	  - error: simulate a model failure
//
// The same in JSON:
//
//	{"name": "weather", "turns": [
//	  {"text": "Let me check.", "tool_calls": [
//	    {"tool": "get_weather", "args": {"city": "Paris"}},
//	    {"tool": "get_time", "args": "{\"tz\": \"Europe/Paris\"}", "id": "time-1"}]},
//	  {"text": "It is sunny in Paris."},
//	  {"error": "simulate a model failure"}]}
//
// The first request gets get_weather (ID call_1_1) and get_time (ID
// time-1), in parallel; the second the text; a third fails with the
// scripted error, and a fourth with [llm.ErrScriptExhausted].
//
// Turns by what the request brings: the prompt starts a background build
// and an inline call; each outcome is answered by its own turn, in
// whatever order they come; a turn with two conditions comes before the
// turns of each alone; a retry is answered with corrected arguments; and a
// turn without when answers anything else, once.
//
//	name: reactive
//	turns:
//	  - when: {prompt: {contains: ship}}
//	    tool_calls:
//	      - tool: build
//	      - tool: deploy
//	        args: {}
//	  - when: {retry: {tool: deploy, contains: target}}
//	    tool_calls: [{tool: deploy, args: {target: staging}}]
//	  - when: {result: {tool: deploy}, follow_up: {tool: build}}
//	    text: Built and deployed.
//	  - when: {follow_up: {tool: build, contains: "failed: "}}
//	    text: The build failed.
//	  - when: {follow_up: {tool: build}}
//	    text: Built; deploying.
//	  - when: {result: {tool: deploy}}
//	    text: Deployed; the build still runs.
//	  - text: I did not expect that.
//
// examples/demo/run.yaml (the demo of `make run`) is a whole story in this
// form: two background tasks, an approval and a question for a person, told
// the same on a fast and on a slow machine.
//
// # Errors
//
// [Parse] and [Load] reject unknown keys, values of the wrong type, a
// script without turns, a turn with neither text, tool_calls nor error (a
// turn with only when included), a turn with an error and anything else,
// tool names that [tool.ValidateName] refuses (in calls and in conditions),
// duplicate call IDs within a turn, arguments that cannot be encoded as
// JSON, and a when without any condition ({} or {prompt: null}: "when needs
// prompt, result, retry or follow_up"). Their errors wrap [ErrInvalidScript]
// and name the turn (from 1) and, where known, the line, e.g.
//
//	script: load run.yaml: invalid script: turn 2 (line 9): tool call 1: tool: invalid name: "not ok" must match ^[A-Za-z0-9_-]{1,64}$
//
// [FromTurns] checks turns the same way, but an invalid turn is reported
// only when it is reached, by Generate; a turn whose When itself is invalid
// is reached by the first request that gets to it in the script's order.
// While a script runs, a request fails with
//
//	script "weather": request 4: llm: script exhausted (the script has 3 turns)
//	script "reactive": request 9: llm: script exhausted (no turn's when matches it, and the turn without when is used up)
//	script "weather": turn 3: scripted model failure: simulate a model failure
package script
