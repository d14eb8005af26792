//go:build soak

package offloadtest

// Soak is true under the soak build tag: [Bound] asserts its bounds.
const Soak = true
