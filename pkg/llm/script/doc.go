// Package script holds scripted models: [FuncModel], whose responses come
// from a Go function (pydantic-ai's FunctionModel), and [Model], which
// answers with canned turns from a Go slice ([FromTurns]) or a YAML or JSON
// file ([Load], [Parse]); the latter is the `--model script:FILE` of the
// agent command.
//
// A scripted [Model] answers the n-th request with the n-th turn, whatever
// the request holds. It never cycles: a request beyond the last turn fails
// with an error wrapping [llm.ErrScriptExhausted] that says how many turns
// the script has and which request asked. A turn with an error makes the
// request fail with an error wrapping [ErrScriptedFailure].
//
// Both kinds stream by splitting their response: text word by word (each
// word keeping its trailing white space) and each tool call whole, in one
// [llm.Delta]; a [FuncModel] may stream with its own function instead
// ([WithStream]).
//
// # File format
//
// A script is an object with an optional "name" (defaults to the file name
// without its extension for [Load], to [DefaultName] for [Parse]) and a
// non-empty list of "turns". A turn has "text", "tool_calls" or both; or
// only an "error". A tool call has a "tool" name, optional "args" (an
// object, or a string sent exactly as written, e.g. to send invalid JSON;
// defaults to {}) and an optional "id" (defaults to call_<turn>_<i>, both
// counted from 1). Unknown keys are errors. In YAML:
//
//	name: weather
//	turns:
//	  - tool_calls:
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
//	  {"tool_calls": [
//	    {"tool": "get_weather", "args": {"city": "Paris"}},
//	    {"tool": "get_time", "args": "{\"tz\": \"Europe/Paris\"}", "id": "time-1"}]},
//	  {"text": "It is sunny in Paris."},
//	  {"error": "simulate a model failure"}]}
//
// The first turn calls get_weather (ID call_1_1) and get_time (ID time-1) in
// parallel; the second answers with text; a third request fails with the
// scripted error, and a fourth with [llm.ErrScriptExhausted].
package script
