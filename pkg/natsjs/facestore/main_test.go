package facestore_test

import (
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
)

func TestMain(m *testing.M) { offloadtest.WrapTestMain(m) }

// bundle is an embedded server for one test.
type bundle struct{ srv *natstest.Server }

// setup starts an embedded server for t.
func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{srv: natstest.Start(t)}
}
