package tool_test

import (
	"context"
	"testing"

	"github.com/offload-dev/offload/pkg/tool"
)

func TestOnly(t *testing.T) {
	t.Parallel()
	mk := func(name string) *tool.Tool {
		return tool.Func(name, "A tool.", func(context.Context, *tool.RunContext, struct{}) (string, error) { return "", nil })
	}
	set, err := tool.NewSet(mk("a"), mk("b"), mk("c"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tool.Only(set, "c", "a", "zzz").Tools(context.Background())
	if err != nil || len(got) != 2 || got[0].Name != "a" || got[1].Name != "c" {
		t.Fatalf("Only(c, a): %v, %v", got, err)
	}
	if all, _ := tool.Only(set).Tools(context.Background()); len(all) != 3 {
		t.Fatalf("Only(): %d tools, want all 3", len(all))
	}
	if again, _ := set.Tools(context.Background()); len(again) != 3 {
		t.Fatal("Only changed the underlying set")
	}
}
