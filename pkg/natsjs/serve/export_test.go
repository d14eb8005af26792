package serve

// NextSweep is nextSweep, for the tests of package serve_test.
var NextSweep = nextSweep
