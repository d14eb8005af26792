package openaicompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
)

// FuzzStreamDecode feeds arbitrary bodies through the SSE reader, the chunk
// decoder and the accumulator: whatever a server sends, they return an
// error or a response, and never panic.
func FuzzStreamDecode(f *testing.F) {
	for _, fx := range openaitest.Providers() {
		for _, r := range fx.Replies {
			f.Add([]byte(r.Body))
		}
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1}]}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":[{\"type\":\"thinking\",\"thinking\":\"x\"}]}}]}\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := newSSEReader(bytes.NewReader(body))
		acc := newAccumulator(nil)
		for range 10000 {
			data, err := r.next()
			if err != nil {
				if !errors.Is(err, errDone) {
					_ = acc.finished()
				}
				break
			}
			var c wireChunk
			if json.Unmarshal(data, &c) != nil {
				break
			}
			acc.add(&c, func(llm.Delta) {})
			_ = acc.failure("key")
		}
		resp := acc.response("m")
		for _, p := range resp.Parts {
			_ = p.PartKind()
		}
	})
}
