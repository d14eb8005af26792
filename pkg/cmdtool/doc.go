// Package cmdtool builds tools backed by a command, in any language, from
// the toolworker's --config YAML file (SPEC §6.5).
//
// # Format
//
//	tools:
//	  - name: research                 # subject-safe: [A-Za-z0-9_-]{1,64}
//	    description: Research a topic thoroughly.
//	    command: ["python3", "research.py"]
//	    timeout: 10m                   # default 1m
//	    parameters:                    # JSON Schema of the arguments (an object schema)
//	      type: object
//	      properties: {query: {type: string}}
//	      required: [query]
//	    metadata: {background: true}   # or "optional"; other keys pass through
//	    requires_approval: false
//	    output: text                   # or json
//
// Unknown keys are errors, reported with their line number.
//
// # Running a command
//
// For each call the command runs in the working directory (by default the
// directory of the config file) with the call's arguments as JSON on stdin,
// and writes its result on stdout:
//
//   - one trailing newline of stdout is trimmed;
//   - stdout larger than [MaxOutputBytes] is a [ResultTooLarge] error;
//   - with output: json, stdout is parsed as JSON (the tool returns it as a
//     [encoding/json.RawMessage]); invalid JSON is an [InvalidOutput] error;
//     with output: text, the tool returns stdout as a string;
//   - an exit code other than 0 is a [CommandFailed] error; stderr is logged,
//     never part of the error's message, so the model does not see it;
//   - a command running longer than its timeout is killed and the call is a
//     [DeadlineExceeded] error;
//   - cancelling the call's context kills the command and every process it
//     started (its process group, on Unix).
//
// The command's environment is minimal (PATH, HOME, LANG, TZ, the spec's
// env names and the task's OFFLOAD_* variables). When the process is root,
// the command runs as the tool user (Options.ToolUser; toolworker
// --tool-user, default nobody) with every privilege dropped, HOME its
// home: it cannot read the worker's environment or memory. That user must
// be able to enter the working directory, to run the program (to read it
// too, for a script), and to write wherever the command writes; [Config.Tools]
// fails at start when it cannot enter the directory or run the program.
//
// The model sees these errors only as {"error":"<type>"} (see
// [github.com/offload-dev/offload/pkg/tool.ErrorType]), where <type> is the
// error's Go type name: CommandFailed, ResultTooLarge, DeadlineExceeded or
// InvalidOutput.
package cmdtool
