package deploy

import (
	"flag"
	"os"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/authconf"
)

var update = flag.Bool("update", false, "rewrite the shipped auth.conf files from authconf.Shipped")

// The shipped auth.conf files are authconf.Shipped rendered: operators,
// the binaries (toolworker --print-auth) and these tests share one
// definition of each role's permissions. Regenerate them with
// go test ./deploy -run TestAuthConfGenerated -update.
func TestAuthConfGenerated(t *testing.T) {
	t.Parallel()
	want := authconf.Shipped().Render()
	for _, path := range []string{"nats/auth.conf", "kubernetes/auth.conf"} {
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is not authconf.Shipped() rendered: regenerate it with go test ./deploy -run TestAuthConfGenerated -update", path)
		}
	}
}
