package cmdtool

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/offload-dev/offload/pkg/limits"
)

// ExitTempFail is the exit code (EX_TEMPFAIL of sysexits.h) by which a
// tool's command says the service behind it refused the call for now
// (SPEC §19): its stdout says after how many seconds to run it again, a
// number ("2.5") or {"retry_after": N}. The worker holds the tool's calls
// on every replica until then and runs the call again after it, without
// counting a retry of the model.
const ExitTempFail = 75

// DefaultRetryAfter is the cool-down of a command that exits
// [ExitTempFail] without saying how long.
const DefaultRetryAfter = time.Second

// retryAfterOf reads the delay a command exiting ExitTempFail wrote on
// stdout; DefaultRetryAfter and false when it wrote none that reads.
func retryAfterOf(out []byte) (time.Duration, bool) {
	out = bytes.TrimSpace(out)
	var n float64
	if v, err := strconv.ParseFloat(string(out), 64); err == nil {
		n = v
	} else {
		var obj struct {
			RetryAfter *float64 `json:"retry_after"`
		}
		if json.Unmarshal(out, &obj) != nil || obj.RetryAfter == nil {
			return DefaultRetryAfter, false
		}
		n = *obj.RetryAfter
	}
	d, ok := limits.Seconds(n)
	if !ok {
		return DefaultRetryAfter, false
	}
	return d, true
}
