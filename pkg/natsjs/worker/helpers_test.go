package worker_test

import "github.com/offload-dev/offload/pkg/natsjs/internal/jstest"

// wait bounds every wait on a signal in these tests.
const wait = jstest.Wait

// testAckWait is the consumers' ack wait in these tests.
const testAckWait = jstest.AckWait
