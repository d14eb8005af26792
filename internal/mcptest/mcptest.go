// Package mcptest locates the real MCP servers the tests run against:
// reference servers no one here wrote, installed from npm with pinned
// versions (internal/mcptest/node: package.json and package-lock.json;
// .ci/run runs npm ci there), never vendored.
package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Everything is the pinned version of @modelcontextprotocol/server-everything.
const Everything = "2026.8.31"

// dir is the directory of the npm project.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "node")
}

// EverythingScript returns the absolute path of server-everything's entry
// point (node SCRIPT stdio|streamableHttp) and of node. Without node or
// the installed package the test is skipped, except in CI (CI set) or
// with OFFLOAD_REQUIRE_MCP=1, where it fails.
func EverythingScript(tb testing.TB) (node, script string) {
	tb.Helper()
	node, err := exec.LookPath("node")
	script = filepath.Join(dir(), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	_, serr := os.Stat(script)
	if err != nil || serr != nil {
		msg := "node and @modelcontextprotocol/server-everything are needed (npm ci --prefix internal/mcptest/node, which .ci/run runs)"
		if os.Getenv("CI") != "" || os.Getenv("OFFLOAD_REQUIRE_MCP") == "1" {
			tb.Fatalf("%s: %v, %v", msg, err, serr)
		}
		tb.Skipf("%s: %v, %v", msg, err, serr)
	}
	return node, script
}

// EverythingStdio returns the command of a stdio server-everything.
func EverythingStdio(tb testing.TB) []string {
	tb.Helper()
	node, script := EverythingScript(tb)
	return []string{node, script, "stdio"}
}

// ChangingToolsStdio returns the command of a stdio MCP server whose tool
// set changes on a call (changing-tools.mjs: the official TypeScript SDK,
// @modelcontextprotocol/sdk, driven by a script), for the tests of
// notifications/tools/list_changed. Skipped or failed as
// [EverythingScript] is.
func ChangingToolsStdio(tb testing.TB) []string {
	tb.Helper()
	node, _ := EverythingScript(tb) // the SDK is installed with it
	return []string{node, filepath.Join(dir(), "changing-tools.mjs")}
}
