package a2aface_test

import (
	"testing"

	"github.com/offload-dev/offload/internal/offloadtest"
)

func TestMain(m *testing.M) { offloadtest.WrapTestMain(m) }
