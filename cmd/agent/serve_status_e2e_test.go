package main

import (
	"testing"
)

// A conversation agent run paused, that no replica ever ran, is listed by
// agent serve's GET /v1/conversations as paused: the status index is
// written by whoever holds the lease, agent run too.
func TestServeE2EListsAgentRun(t *testing.T) {
	w := newServeWorld(t)
	_, url := w.replica(t)
	conv, _ := w.paused("--spec", w.spec, deployProd)
	code, list := api(t, "GET", url+"/v1/conversations?status=paused", serveViewer, "")
	convs, _ := list["conversations"].([]any)
	if code != 200 || len(convs) != 1 {
		t.Fatalf("list: %d %v, want %s paused", code, list, conv)
	}
	if got := convs[0].(map[string]any); got["conversation_id"] != conv || got["status"] != "paused" {
		t.Fatalf("listed %v, want %s paused", got, conv)
	}
}
