package worker_test

import (
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
)

func TestMain(m *testing.M) { jstest.VerifyTestMain(m) }
