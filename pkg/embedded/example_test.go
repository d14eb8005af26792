package embedded_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/offload-dev/offload/pkg/embedded"
)

func ExampleStart() {
	store, _ := os.MkdirTemp("", "store")
	defer os.RemoveAll(store)
	ctx := context.Background()

	first, err := embedded.Start(ctx, embedded.Config{StoreDir: store})
	if err != nil {
		panic(err)
	}
	// A second process on the same store shares the first one's server.
	second, err := embedded.Start(ctx, embedded.Config{StoreDir: store})
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.HasPrefix(first.URL(), "nats://127.0.0.1:"), first.Shared())
	fmt.Println(second.URL() == first.URL(), second.Shared())

	_ = second.Shutdown(ctx) // no-op: not ours
	_ = first.Shutdown(ctx)  // removes nats.url, stops the server
	_, err = os.Stat(store + "/" + embedded.URLFile)
	fmt.Println(os.IsNotExist(err))
	// Output:
	// true false
	// true true
	// true
}
