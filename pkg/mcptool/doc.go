// Package mcptool serves the tools of MCP servers as offload tools (SPEC
// §16): the MCP client side of a worker.
//
// A [Server] is one configured MCP server ([ServerConfig], the
// mcp_servers: entries of `toolworker --config`, or the --mcp shorthand
// [ParseShorthand]): a stdio server started, supervised (restarted with
// backoff when it exits) and stopped by the worker, contained like a
// command tool (its own process group, the worker's subreaper, the
// minimal environment plus env:, the unprivileged tool user under a root
// worker: internal/proc), or a streamable HTTP server reached with headers
// whose ${NAME}s come from the worker's environment variables listed in
// env:. [Server.Tools] turns each listed MCP tool into a [tool.Tool] the
// worker serves from its normal per-tool consumer: its description and
// input schema, its annotations and server in the metadata (mcp.server,
// mcp.annotations), idempotent from readOnlyHint or idempotentHint unless
// an override says otherwise.
//
// A call maps MCP to offload: text parts become the result's content
// (structuredContent, when present, instead, the texts going to the
// model's user content), image and audio parts become files of the user
// content, isError a retry the model sees, a JSON-RPC error an error of
// type MCPError; notifications/progress become offload progress; an
// offload cancel sends notifications/cancelled, or tasks/cancel for an
// MCP task. A tool with execution.taskSupport optional (for a background
// call) or required runs as an MCP task (2025-11-25): created, recorded in
// the attempt's effect-ledger entry (tool.RunContext.Checkpoint), polled
// with tasks/get at the server's pollInterval while the worker keeps the
// offload task alive, and its result fetched with tasks/result; a delivery
// after the worker stopped resumes polling the recorded task instead of
// calling the tool again. Sampling requests are refused: a worker has no
// model.
//
// The MCP protocol is spoken by github.com/mark3labs/mcp-go, the one Go
// SDK with 2025-11-25 tasks on the client side.
package mcptool
