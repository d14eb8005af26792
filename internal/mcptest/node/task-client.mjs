// An MCP client driven by a Go test, step by step: the official
// TypeScript SDK's client (@modelcontextprotocol/sdk, its 2025-11-25
// tasks API), over streamable HTTP with a bearer token.
//
// Each line of stdin is one step, a JSON object; each step's outcome is
// one line of stdout, {"ok": …} or {"error": "…"}. Steps:
//   {"op":"connect","client":"a","url":…,"token":…,"elicit":{"approved":true}|null}
//       (elicit: the content every elicitation is accepted with; null: none
//       declared; "decline": declined)
//   {"op":"list","client":"a"}                       → the tools
//   {"op":"call","client":"a","tool":…,"args":{…}}   → a plain call's result
//   {"op":"stream","client":"a","tool":…,"args":{…}} → callToolStream's messages
//   {"op":"create","client":"a","tool":…,"args":{…}} → a CreateTaskResult
//   {"op":"get"|"result"|"cancel","client":"a","taskId":…}
//   {"op":"tasks","client":"a"}                       → tasks/list
//   {"op":"elicitations","client":"a"}                → the elicitations received so far
//   {"op":"statuses","client":"a"}                    → the notifications/tasks/status received so far
// A step with "async":"NAME" starts and answers {"started":NAME} at once;
// {"op":"await","name":NAME} answers its outcome once it has one.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema, ElicitRequestSchema, TaskStatusNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const clients = {};
const started = {};
const elicitations = {};
const statuses = {};

async function step(s) {
  const c = clients[s.client];
  switch (s.op) {
    case 'connect': {
      const caps = s.elicit === null || s.elicit === undefined ? {} : { elicitation: {} };
      const client = new Client({ name: 'offload-test', version: '1.0.0' }, { capabilities: caps });
      elicitations[s.client] = [];
      statuses[s.client] = [];
      client.setNotificationHandler(TaskStatusNotificationSchema, (n) => {
        statuses[s.client].push({ taskId: n.params.taskId, status: n.params.status });
      });
      if (caps.elicitation) {
        client.setRequestHandler(ElicitRequestSchema, async (req) => {
          elicitations[s.client].push(req.params);
          if (s.elicit === 'decline') return { action: 'decline' };
          return { action: 'accept', content: s.elicit };
        });
      }
      const transport = new StreamableHTTPClientTransport(new URL(s.url), {
        requestInit: { headers: { Authorization: `Bearer ${s.token}` } },
      });
      await client.connect(transport);
      clients[s.client] = client;
      return client.getServerCapabilities();
    }
    case 'list':
      return (await c.listTools()).tools;
    case 'call':
      return await c.callTool({ name: s.tool, arguments: s.args }, CallToolResultSchema, { timeout: 60000 });
    case 'stream': {
      const out = [];
      for await (const m of c.experimental.tasks.callToolStream({ name: s.tool, arguments: s.args }, CallToolResultSchema,
        { task: { ttl: 600000 }, timeout: 60000 })) {
        out.push(m.type === 'error' ? { type: 'error', error: String(m.error?.message ?? m.error) } : m);
      }
      return out;
    }
    case 'create':
      return await c.request({ method: 'tools/call', params: { name: s.tool, arguments: s.args, task: { ttl: 600000 } } },
        CreateTaskResultSchema);
    case 'get':
      return await c.experimental.tasks.getTask(s.taskId);
    case 'result':
      return await c.experimental.tasks.getTaskResult(s.taskId, CallToolResultSchema, { timeout: 60000 });
    case 'cancel':
      return await c.experimental.tasks.cancelTask(s.taskId);
    case 'tasks':
      return await c.experimental.tasks.listTasks();
    case 'elicitations':
      return elicitations[s.client];
    case 'statuses':
      return statuses[s.client];
    case 'await':
      return await started[s.name];
    default:
      throw new Error(`unknown op ${s.op}`);
  }
}

const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  let out;
  try {
    const s = JSON.parse(line);
    if (s.async) {
      started[s.async] = step(s);
      started[s.async].catch(() => {}); // awaited by its await step
      out = { ok: { started: s.async } };
    } else {
      out = { ok: (await step(s)) ?? null };
    }
  } catch (e) {
    out = { error: String(e?.message ?? e), code: e?.code };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}
for (const c of Object.values(clients)) await c.close();
