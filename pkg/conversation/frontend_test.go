package conversation_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/offload-dev/offload/pkg/conversation"
	"github.com/offload-dev/offload/pkg/tool"
)

// TestFrontendTools: a conversation's frontend tools survive its JSON
// form and are external tools, their names and schemas checked as any
// tool's; null or empty parameters are an object of any properties.
func TestFrontendTools(t *testing.T) {
	st := &conversation.State{ID: "c", FrontendTools: []conversation.FrontendTool{
		{Name: "pick_color", Description: "Picks.", Parameters: json.RawMessage(`{"type":"object","properties":{"c":{"type":"string"}}}`)},
		{Name: "confirm", Parameters: json.RawMessage(`null`)},
	}}
	got := st.Clone()
	if len(got.FrontendTools) != 2 || !got.FrontendTool("pick_color") || !got.FrontendTool("confirm") || got.FrontendTool("deploy") {
		t.Fatalf("frontend tools after a round trip: %+v", got.FrontendTools)
	}
	for _, d := range got.FrontendTools {
		tl, err := d.Tool()
		if err != nil || tl.Kind != tool.KindExternal || tl.Name != d.Name {
			t.Fatalf("%s: %+v %v", d.Name, tl, err)
		}
	}
	if _, err := (conversation.FrontendTool{Name: "pick color"}).Tool(); !errors.Is(err, tool.ErrInvalidName) {
		t.Fatalf("a name with a space: %v", err)
	}
	if _, err := (conversation.FrontendTool{Name: "x", Parameters: json.RawMessage(`{"type":5}`)}).Tool(); err == nil {
		t.Fatal("a schema that does not compile: no error")
	}
	var nilState *conversation.State
	if nilState.FrontendTool("x") {
		t.Fatal("a nil state has a frontend tool")
	}
}
