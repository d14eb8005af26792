// Package offloadtest is the test kit every test package of the module
// shares (River's riversharedtest is the model):
//
//   - [WrapTestMain], called by the TestMain of each package's
//     main_test.go, runs the tests and fails them when goroutines leak
//     (goleak), with the few ignores the packages need, each documented;
//   - [WaitOrTimeout] receives a signal (a value on a channel), failing
//     the test after [Wait] instead of hanging it;
//   - [Eventually] polls a condition, for the few states that have no
//     signal (another process's state, a consumer's acknowledgements as the
//     server counts them): each caller says why it has none;
//   - [WaitDead] waits until a process is gone;
//   - [Output] is a buffer a logger or a command writes and the test reads
//     or waits on ([Output.WaitFor]: a line logged is a signal);
//   - [Bound] asserts a wall-clock upper bound only under the soak build
//     tag (go test -tags soak): on a loaded machine such a bound is luck,
//     so the ordinary suite logs the figure and checks a signal instead;
//   - [RequireRoot] skips a test that needs root, or fails it where root
//     is required (OFFLOAD_REQUIRE_ROOT, set by CI).
//
// Only tests import it.
package offloadtest
