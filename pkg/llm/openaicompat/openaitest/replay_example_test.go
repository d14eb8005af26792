package openaitest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/message"
)

// A stream cut in the middle is retried: OnRetry says so, and the deltas
// received before it are void.
func ExampleReplay() {
	srv := openaitest.NewReplay(
		openaitest.Reply{Stream: true, Cut: true, Body: openaitest.SSE(
			`{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`)},
		openaitest.Reply{Stream: true, Body: openaitest.SSE(
			`{"choices":[{"index":0,"delta":{"content":"Hello."},"finish_reason":"stop"}]}`,
			"[DONE]")},
	)
	defer srv.Close()
	model, err := openaicompat.New(openaicompat.Config{BaseURL: srv.URL(), Model: "demo", InitialBackoff: time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := &llm.Request{
		Messages: []message.Message{message.NewRequest(message.UserText("Hi"))},
		OnRetry:  func(r llm.Retry) { fmt.Printf("attempt %d: %s\n", r.Attempt, r.Reason) },
	}
	resp, err := model.Stream(context.Background(), req, func(d llm.Delta) { fmt.Printf("delta %q\n", d.Text) })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("answer:", message.NewResponse(resp.Parts...).Text())
	// Output:
	// delta "Hel"
	// attempt 2: stream cut: unexpected EOF
	// delta "Hello."
	// answer: Hello.
}
