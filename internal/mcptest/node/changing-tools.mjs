// A stdio MCP server whose tool set changes on a call, for the tests of
// tools/list_changed (SPEC §16). The MCP side is the official TypeScript
// SDK (@modelcontextprotocol/sdk, pinned in package.json): it sends
// notifications/tools/list_changed on every registerTool, update and
// remove; this script only drives it.
//
// Tools:
//   echo {text}          -> "echo: <text>"
//   add-late             registers late {text, hold?}: "late: <text>", held
//                        until release is called when hold is true
//   change-late          late's description and schema changed ({text, n})
//   remove-late          late removed (a held call of it still finishes)
//   release              lets the held calls of late return
//   add {name}           registers a tool of that name (one offload refuses,
//                        one the worker serves already…)
//   add-many {n}         registers n tools many-0 … many-<n-1>
//   storm {n}            sends n notifications/tools/list_changed at once
//   lists                how many tools/list requests the server answered
//   span {ms}            sleeps ms, returns {"start","end"} (Unix ms)
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "offload-test/changing-tools", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } });
const text = (s) => ({ content: [{ type: "text", text: s }] });

let late = null;
let released;
let release = () => {};
const reset = () => { released = new Promise((r) => { release = r; }); };
reset();

server.registerTool("echo", { description: "Echo the text.", inputSchema: { text: z.string() } }, async ({ text: t }) => text("echo: " + t));
server.registerTool("add-late", { description: "Register the tool late." }, async () => {
  if (!late) {
    late = server.registerTool("late", {
      description: "A tool registered after initialization.",
      inputSchema: { text: z.string(), hold: z.boolean().optional() },
      annotations: { idempotentHint: true },
    }, async ({ text: t, hold }) => {
      if (hold) await released;
      return text("late: " + t);
    });
  }
  return text("added");
});
server.registerTool("change-late", { description: "Change late's schema." }, async () => {
  late.update({ description: "A tool changed after registration.", paramsSchema: { text: z.string(), n: z.number() } });
  return text("changed");
});
server.registerTool("remove-late", { description: "Remove late." }, async () => {
  late.remove();
  late = null;
  return text("removed");
});
server.registerTool("release", { description: "Let the held calls return." }, async () => {
  release();
  reset();
  return text("released");
});
server.registerTool("add", { description: "Register a tool of that name.", inputSchema: { name: z.string() } }, async ({ name }) => {
  server.registerTool(name, { description: "Added by name." }, async () => text("added tool " + name));
  return text("added");
});
server.registerTool("add-many", { description: "Register n tools.", inputSchema: { n: z.number() } }, async ({ n }) => {
  for (let i = 0; i < n; i++) server.registerTool("many-" + i, { description: "One of many." }, async () => text("many"));
  return text("added " + n);
});
server.registerTool("storm", { description: "Send n tools/list_changed.", inputSchema: { n: z.number() } }, async ({ n }) => {
  for (let i = 0; i < n; i++) server.sendToolListChanged();
  return text("sent " + n);
});

server.registerTool("span", { description: "Sleep, say when it ran.", inputSchema: { ms: z.number() } }, async ({ ms }) => {
  const start = Date.now();
  await new Promise((r) => setTimeout(r, ms));
  return text(JSON.stringify({ start, end: Date.now() }));
});

// Count the tools/list requests answered (the SDK's own handler, wrapped).
let lists = 0;
server.registerTool("lists", { description: "How many tools/list requests were answered." }, async () => text(String(lists)));
const handlers = server.server._requestHandlers;
const list = handlers.get("tools/list");
handlers.set("tools/list", async (...args) => { lists++; return list(...args); });

await server.connect(new StdioServerTransport());
