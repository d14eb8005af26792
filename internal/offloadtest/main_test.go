package offloadtest

import "testing"

func TestMain(m *testing.M) { WrapTestMain(m) }
