package main

import (
	"context"
	"strings"

	"github.com/offload-dev/offload/pkg/tool"
)

// The payloads of the measured call, of a realistic size: about 200 bytes
// of arguments and 200 bytes of result, the same in every system.

// lookupArgs are the measured tool's arguments.
type lookupArgs struct {
	Query   string            `json:"query"`
	Limit   int               `json:"limit"`
	Filters map[string]string `json:"filters,omitempty"`
}

// benchArgs is the arguments' JSON (about 200 bytes).
const benchArgs = `{"query":"quarterly revenue of the northern region by product line, excluding returns and internal transfers","limit":20,"filters":{"lang":"en","since":"2026-01-01","until":"2026-06-30","region":"north"}}`

// benchOutput is the tool's return value (about 200 bytes once encoded).
var benchOutput = "Found 20 rows: " + strings.Repeat("north/widgets 1.2M, ", 9)

// lookup is the measured tool: it reads its arguments and returns a fixed
// result of about 200 bytes.
func lookup() *tool.Tool {
	return tool.Func("lookup", "Looks rows up.", func(_ context.Context, _ *tool.RunContext, a lookupArgs) (string, error) {
		if a.Query == "" {
			return "", tool.Retry("query is empty")
		}
		return benchOutput, nil
	})
}
