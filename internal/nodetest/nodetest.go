// Package nodetest finds node and a real npm peer a test runs (an MCP
// server, the AG-UI or A2A JS client): peers no one here wrote, installed
// from npm with pinned versions (package.json and package-lock.json in
// the kit's node directory; .ci/run runs npm ci there), never vendored.
package nodetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Peer is an npm package a test needs, in the npm project at Dir.
type Peer struct {
	// Dir is the npm project's directory (its package.json and
	// package-lock.json).
	Dir string
	// Package is the npm package the test needs, as
	// "@a2a-js/sdk".
	Package string
	// File is the file of the package that shows it installed, relative
	// to the package's directory (default package.json).
	File string
	// Require names the environment variable that, set to 1, makes a
	// missing peer fail the test rather than skip it (as does CI set).
	Require string
}

// Path returns the absolute path of File (package.json when unset) in
// the installed package.
func (p Peer) Path() string {
	file := p.File
	if file == "" {
		file = "package.json"
	}
	return filepath.Join(p.Dir, "node_modules", filepath.FromSlash(p.Package), filepath.FromSlash(file))
}

// Node returns the path of node once it and p are found. Without either
// the test is skipped, except in CI (CI set) or with p.Require set to 1,
// where it fails, saying how to install p.
func Node(tb testing.TB, p Peer) string {
	tb.Helper()
	node, err := exec.LookPath("node")
	_, serr := os.Stat(p.Path())
	if err != nil || serr != nil {
		const format = "node and %s are needed (npm ci --prefix %s, which .ci/run runs): %v, %v"
		if os.Getenv("CI") != "" || os.Getenv(p.Require) == "1" {
			tb.Fatalf(format, p.Package, p.Dir, err, serr)
		}
		tb.Skipf(format, p.Package, p.Dir, err, serr)
	}
	return node
}
