// The A2A JS client (@a2a-js/sdk, pinned in package.json) driving one
// request of offload's A2A face (SPEC §17): node a2a.mjs REQUEST.json
// prints, last, {"result": …} (the proto JSON of what the client
// returned: a task, a message, a list, or the stream's events) or
// {"error": …, "code": …}; before it, a stream's events one a line
// ({"event": …}) as they arrive.
import { readFileSync } from 'node:fs';
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { Message, Task, StreamResponse, ListTasksResponse, TaskPushNotificationConfig, ListTaskPushNotificationConfigsResponse } from '@a2a-js/sdk';

const req = JSON.parse(readFileSync(process.argv[2], 'utf8'));

// fetchImpl adds the bearer token (when the request has one) to every
// request the client makes, the card's included.
const fetchImpl = (url, init = {}) => {
  const headers = new Headers(init.headers || {});
  if (req.token) headers.set('Authorization', `Bearer ${req.token}`);
  return fetch(url, { ...init, headers });
};

const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
  transports: [new JsonRpcTransportFactory({ fetchImpl })],
  cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
}));

// message builds a user message of the request's text and data.
function message() {
  const parts = [];
  if (req.text) parts.push({ content: { $case: 'text', value: req.text } });
  if (req.data) parts.push({ content: { $case: 'data', value: req.data } });
  return { messageId: req.messageId || crypto.randomUUID(), contextId: req.contextId || '', taskId: req.taskId || '',
    role: 1 /* ROLE_USER */, parts, extensions: [], referenceTaskIds: [] };
}

function sendParams() {
  let configuration = req.returnImmediately ? { returnImmediately: true, acceptedOutputModes: [] } : undefined;
  if (req.pushUrl && (req.op === 'send' || req.op === 'stream')) {
    configuration = { ...(configuration ?? { acceptedOutputModes: [] }),
      taskPushNotificationConfig: { tenant: '', id: req.pushId || '', taskId: '', url: req.pushUrl, token: req.pushToken || '', authentication: undefined } };
  }
  return { message: message(), configuration };
}

function out(v) {
  process.stdout.write(JSON.stringify(v) + '\n');
}

try {
  const client = await factory.createFromUrl(req.url, req.cardPath ?? undefined);
  let result;
  switch (req.op) {
    case 'card':
      result = await client.getAgentCard();
      break;
    case 'send': {
      const r = await client.sendMessage(sendParams());
      result = r.messageId !== undefined && r.status === undefined ? { message: Message.toJSON(r) } : { task: Task.toJSON(r) };
      break;
    }
    case 'stream':
    case 'subscribe': {
      const events = [];
      const it = req.op === 'stream' ? client.sendMessageStream(sendParams()) : client.resubscribeTask({ id: req.taskId, tenant: '' });
      for await (const ev of it) {
        const e = StreamResponse.toJSON(ev);
        out({ event: e }); // as it arrives: a test acts on it
        events.push(e);
      }
      result = { events };
      break;
    }
    case 'get':
      result = { task: Task.toJSON(await client.getTask({ id: req.taskId, tenant: '' })) };
      break;
    case 'list':
      result = ListTasksResponse.toJSON(await client.listTasks({ tenant: '', contextId: req.contextId || '', status: 0 /* TASK_STATE_UNSPECIFIED: any */, pageSize: req.pageSize || 0, pageToken: req.pageToken || '', includeArtifacts: true }));
      break;
    case 'cancel':
      result = { task: Task.toJSON(await client.cancelTask({ id: req.taskId, tenant: '' })) };
      break;
    case 'push-create':
      result = TaskPushNotificationConfig.toJSON(await client.createTaskPushNotificationConfig({ tenant: '', id: req.pushId || '', taskId: req.taskId, url: req.pushUrl, token: req.pushToken || '', authentication: undefined }));
      break;
    case 'push-get':
      result = TaskPushNotificationConfig.toJSON(await client.getTaskPushNotificationConfig({ tenant: '', taskId: req.taskId, id: req.pushId }));
      break;
    case 'push-list':
      result = ListTaskPushNotificationConfigsResponse.toJSON(await client.listTaskPushNotificationConfig({ tenant: '', taskId: req.taskId, pageSize: 0, pageToken: '' }));
      break;
    case 'push-delete':
      await client.deleteTaskPushNotificationConfig({ tenant: '', taskId: req.taskId, id: req.pushId });
      result = { deleted: req.pushId };
      break;
    default:
      throw new Error(`unknown op ${req.op}`);
  }
  out({ result });
} catch (e) {
  out({ error: String(e?.message ?? e), code: e?.code ?? null, name: e?.constructor?.name ?? null });
}
