package openaitest_test

import (
	"context"
	"fmt"

	"github.com/offload-dev/offload/pkg/llm"
	"github.com/offload-dev/offload/pkg/llm/openaicompat"
	"github.com/offload-dev/offload/pkg/llm/openaicompat/openaitest"
	"github.com/offload-dev/offload/pkg/message"
)

// echoModel answers with the last user text.
type echoModel struct{}

func (echoModel) Name() string { return "echo" }

func (echoModel) Generate(_ context.Context, req *llm.Request) (*llm.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	up := last.Parts[len(last.Parts)-1].(message.UserPrompt)
	return &llm.Response{Parts: []message.Part{message.Text{Content: "you said: " + up.Content[0].Text}}}, nil
}

func (m echoModel) Stream(ctx context.Context, req *llm.Request, _ func(llm.Delta)) (*llm.Response, error) {
	return m.Generate(ctx, req) // the server streams the answer word by word
}

func ExampleNewServer() {
	srv := openaitest.NewServer(echoModel{})
	defer srv.Close()

	// Any OpenAI-compatible client works; a binary under test would get
	// srv.URL() through OPENAI_BASE_URL.
	client, err := openaicompat.New(openaicompat.Config{BaseURL: srv.URL(), Model: "echo"})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := &llm.Request{Messages: []message.Message{message.NewRequest(message.UserText("hello there"))}}
	resp, err := client.Stream(context.Background(), req, func(d llm.Delta) { fmt.Printf("%q\n", d.Text) })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(message.Message{Parts: resp.Parts}.Text())
	fmt.Println(len(srv.Requests()), "request")
	// Output:
	// "you "
	// "said: "
	// "hello "
	// "there"
	// you said: hello there
	// 1 request
}
