package convstore_test

import "github.com/offload-dev/offload/pkg/natsjs/internal/jstest"

// wait bounds every wait on a signal in these tests.
const wait = jstest.Wait
