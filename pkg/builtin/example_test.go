package builtin_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"github.com/offload-dev/offload/pkg/builtin"
	"github.com/offload-dev/offload/pkg/tool"
)

// http_fetch dials only public addresses by default; the check runs at dial
// time, so a name resolving to a private address is refused too.
func ExamplePublicAddr() {
	for _, a := range []string{"93.184.216.34", "127.0.0.1", "169.254.169.254", "10.0.0.7", "100.64.1.1", "::ffff:192.168.1.1"} {
		fmt.Println(a, builtin.PublicAddr(netip.MustParseAddr(a)))
	}
	// Output:
	// 93.184.216.34 true
	// 127.0.0.1 false
	// 169.254.169.254 false
	// 10.0.0.7 false
	// 100.64.1.1 false
	// ::ffff:192.168.1.1 false
}

// The model gets a short reason, never the dial error.
func ExampleTools_refusedAddress() {
	root, _ := os.MkdirTemp("", "root")
	defer os.RemoveAll(root)
	tools, _ := builtin.Tools(builtin.Config{
		Root: root,
		// A resolver that sends every name to the cloud metadata address.
		HTTPLookup: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
		},
	})
	fetch := tools[0]
	_, err := fetch.Run(context.Background(), &tool.RunContext{}, []byte(`{"url":"http://metadata.example/latest"}`))
	fmt.Println(err)
	// Output: http_fetch: GET http://metadata.example/latest: address not allowed
}
