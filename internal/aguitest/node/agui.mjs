// Drives the AG-UI face with the AG-UI JS client (@ag-ui/client, pinned
// in package-lock.json): one run of an HttpAgent on one thread, as a
// frontend makes it. Input (argv[2], a JSON file): {url, token, threadId,
// runId, messages, prompt?, resume?, tools?, toolResult?: {toolCallId,
// content}}. Output (stdout, one JSON object):
// {events, messages, result, error}: what the client received and made of it.
import { readFileSync } from "node:fs";
import { HttpAgent } from "@ag-ui/client";

const req = JSON.parse(readFileSync(process.argv[2], "utf8"));
const agent = new HttpAgent({
  url: req.url,
  headers: { Authorization: `Bearer ${req.token}` },
  threadId: req.threadId,
  initialMessages: req.messages ?? [],
});
if (req.prompt) {
  agent.addMessage({ id: `user-${req.runId}`, role: "user", content: req.prompt });
}
if (req.toolResult) {
  agent.addMessage({ id: `tool-${req.runId}`, role: "tool", ...req.toolResult });
}
const events = [];
const out = { events, messages: [], result: null, error: null };
try {
  const res = await agent.runAgent(
    { runId: req.runId, ...(req.resume ? { resume: req.resume } : {}), ...(req.tools ? { tools: req.tools } : {}) },
    { onEvent: ({ event }) => { events.push(event); } },
  );
  out.result = res.result ?? null;
} catch (err) {
  out.error = String(err?.message ?? err);
}
out.messages = agent.messages;
process.stdout.write(JSON.stringify(out));
