// An offload worker in JavaScript (Node 20, the official NATS client), written
// from docs/PROTOCOL.md alone. It serves one tool, nap: {"seconds": number}
// sleeps that long and answers {"slept_seconds": seconds}.
//
//   node worker.mjs [--nats URL] [--id ID] [--prefix tools] [--concurrency 4] [--grace 10]
//
// Every rule it follows is a section of docs/PROTOCOL.md ("Writing a
// worker"); `toolworker check --tool nap` checks them (see README.md).

import { connect, StringCodec } from "nats";

const TOOL = "nap";
const SCHEMA = {
  type: "object",
  properties: { seconds: { type: "number", minimum: 0, description: "how long to sleep" } },
  required: ["seconds"],
};
const REGISTRY_TTL_MS = 30_000; // expires_at = now + 30 s ...
const REGISTRY_REFRESH_MS = 10_000; // ... rewritten every 10 s
const ULID = /^[0-9A-HJKMNP-TV-Z]{26}$/;

const opts = flags(process.argv.slice(2), {
  nats: process.env.NATS_URL || "nats://127.0.0.1:4222",
  id: `node-${process.pid}`,
  prefix: "tools",
  concurrency: "4",
  grace: "10",
});
const prefix = opts.prefix;
const up = prefix.toUpperCase();
const names = {
  tasks: `${up}_TASKS`,
  cancel: `${up}_CANCEL`,
  consumer: `task_${TOOL}`,
  bucket: `${prefix}_registry`,
};
const concurrency = Number(opts.concurrency);
const sc = StringCodec();
const log = (msg, attrs = {}) => console.error(JSON.stringify({ time: new Date().toISOString(), msg, ...attrs }));

const nc = await connect({ servers: opts.nats.split(","), name: `node-worker ${opts.id}`, maxReconnectAttempts: -1 });
const js = nc.jetstream();
const jsm = await nc.jetstreamManager();

// The task consumer: bound, or created from jetstream/consumers/task.json
// when missing. Its real ack wait sets the in-progress cadence; its
// metadata holds the delivery limit.
let info;
try {
  info = await jsm.consumers.info(names.tasks, names.consumer);
} catch (err) {
  if (!/consumer not found/i.test(String(err?.message))) throw err;
  const s = 1_000_000_000;
  info = await jsm.consumers.add(names.tasks, {
    durable_name: names.consumer,
    filter_subject: `${prefix}.task.${TOOL}`,
    deliver_policy: "all",
    ack_policy: "explicit",
    ack_wait: 10 * s,
    max_deliver: -1,
    backoff: [10 * s, 10 * s, 10 * s, 30 * s, 60 * s],
    replay_policy: "instant",
    max_waiting: 512,
    max_ack_pending: 256,
    metadata: { "offload.max_deliver": "20" },
  });
}
const ackWaitMs = info.config.ack_wait / 1e6;
const deliveryLimit = Number(info.config.metadata?.["offload.max_deliver"] ?? 0);
const consumer = await js.consumers.get(names.tasks, names.consumer);

// The registry entry: key <tool>.<worker-id> (the ID as one KV token).
const kv = await js.views.kv(names.bucket, { bindOnly: true });
const key = `${TOOL}.${opts.id.replace(/[^-_=a-zA-Z0-9]/g, "_") || "_"}`;
const advertise = async () => {
  const entry = {
    name: TOOL,
    description: "Sleep for some seconds, then say so.",
    parameters: SCHEMA,
    // Sleeping has no side effect: a redelivery may run it again, so this
    // worker keeps no effect ledger (docs/PROTOCOL.md, effects). A tool
    // with side effects must not say so, and must keep the ledger.
    idempotent: true,
    worker: opts.id,
    expires_at: new Date(Date.now() + REGISTRY_TTL_MS).toISOString(),
  };
  await kv.put(key, JSON.stringify(entry)); // no per-message TTL: the bucket's max age applies
};
await advertise();
const refresh = setInterval(() => advertise().catch((err) => log("registry refresh failed", { error: String(err) })), REGISTRY_REFRESH_MS);

// Cancels: live by a core subscription; before a task runs and after a
// reconnect, by a direct get of the last message of its cancel subject.
const running = new Map(); // "<conversation>.<task>" → AbortController
nc.subscribe(`${prefix}.cancel.*.*.${TOOL}`, {
  callback: (err, m) => {
    if (err) return;
    const [, , conv, task] = m.subject.split(".");
    running.get(`${conv}.${task}`)?.abort("cancelled");
  },
});
const cancelSubject = (t) => `${prefix}.cancel.${t.conversation_id}.${t.task_id}.${TOOL}`;
const cancelStored = async (t) => {
  try {
    await jsm.direct.getMessage(names.cancel, { last_by_subj: cancelSubject(t) });
    return true;
  } catch (err) {
    if (err?.code === "404" || /no message found/i.test(String(err?.message))) return false;
    throw err;
  }
};
(async () => {
  for await (const s of nc.status()) {
    if (s.type !== "reconnect") continue;
    for (const [k, ac] of running) {
      const [conv, task] = k.split(".");
      cancelStored({ conversation_id: conv, task_id: task })
        .then((c) => c && ac.abort("cancelled"))
        .catch(() => {}); // the next reconnect looks again
    }
  }
})();

// publishResult stores a result: subject <prefix>.result.<conv>.<task>.<tool>,
// Nats-Msg-Id res:<task>:<attempt> with the task's attempt (never the
// delivery count). A failed publish is retried (the in-progress acks go on).
async function publishResult(task, res, startedAt) {
  const attempt = Number.isInteger(task.attempt) ? task.attempt : 0;
  const body = {
    task_id: task.task_id,
    tool_call_id: task.tool_call_id,
    attempt,
    worker: opts.id,
    ...(startedAt ? { started_at: startedAt } : {}),
    finished_at: new Date().toISOString(),
    ...res,
  };
  const subject = `${prefix}.result.${task.conversation_id}.${task.task_id}.${TOOL}`;
  for (let wait = 100; ; wait = Math.min(2 * wait, 5000)) {
    try {
      await js.publish(subject, sc.encode(JSON.stringify(body)), { msgID: `res:${task.task_id}:${attempt}` });
      return true;
    } catch (err) {
      if (nc.isClosed()) return false;
      log("result not published; retrying", { task_id: task.task_id, error: String(err) });
      await sleep(wait);
    }
  }
}

let stopping = false;

async function handle(m) {
  if (stopping) return m.nak(); // a task delivered while stopping goes back, unrun
  let task;
  try {
    task = JSON.parse(sc.decode(m.data));
  } catch {
    return m.term(); // not JSON: no task to answer
  }
  const problem = checkTask(task);
  if (problem) {
    if (ULID.test(task?.task_id) && ULID.test(task?.conversation_id)) {
      await publishResult(task, { status: "error", error_type: "MalformedTask", message: problem });
    }
    return m.term();
  }
  const k = `${task.conversation_id}.${task.task_id}`;
  const ac = new AbortController();
  running.set(k, ac);
  const beat = setInterval(() => m.working(), ackWaitMs / 3);
  let deadlineTimer;
  try {
    if (deliveryLimit > 0 && m.info.deliveryCount > deliveryLimit) {
      const message = `delivered ${deliveryLimit} times without a result`;
      if (await publishResult(task, { status: "error", error_type: "DeliveriesExhausted", message })) m.term();
      return;
    }
    let cancelled;
    try {
      cancelled = ac.signal.aborted || (await cancelStored(task));
    } catch (err) {
      log("cancel look-up failed; task handed back", { task_id: task.task_id, error: String(err) });
      return m.nak(Math.min(m.info.deliveryCount * 1000, 10_000));
    }
    if (cancelled) {
      if (await publishResult(task, { status: "cancelled" })) m.term();
      return;
    }
    if (task.deadline && Date.parse(task.deadline) <= Date.now()) {
      if (await publishResult(task, { status: "error", error_type: "DeadlineExceeded" })) m.ack();
      return;
    }
    const seconds = task.args.seconds;
    if (typeof seconds !== "number" || !(seconds >= 0)) {
      const res = { status: "retry", error_type: "InvalidArguments", message: "seconds: a number ≥ 0 is required" };
      if (await publishResult(task, res)) m.ack();
      return;
    }
    if (task.deadline) deadlineTimer = setTimeout(() => ac.abort("deadline"), Date.parse(task.deadline) - Date.now());
    const startedAt = new Date().toISOString();
    const progress = { task_id: task.task_id, message: `napping ${seconds}s`, fraction: 0, at: startedAt };
    nc.publish(`${prefix}.progress.${task.conversation_id}.${task.task_id}.${TOOL}`, sc.encode(JSON.stringify(progress)));
    const ended = await nap(seconds * 1000, ac.signal);
    if (ended === "shutdown") return m.nak(); // handed back, no result
    const res =
      ended === "cancelled"
        ? { status: "cancelled" }
        : ended === "deadline"
          ? { status: "error", error_type: "DeadlineExceeded" }
          : { status: "ok", content: { slept_seconds: seconds } };
    if (await publishResult(task, res, startedAt)) ended === "cancelled" ? m.term() : m.ack();
  } finally {
    clearTimeout(deadlineTimer);
    clearInterval(beat);
    running.delete(k);
  }
}

// checkTask returns why a task is malformed, or "" when it is not.
function checkTask(t) {
  if (typeof t !== "object" || t === null || Array.isArray(t)) return "a task is a JSON object";
  if (!ULID.test(t.task_id)) return "task_id: a ULID is required";
  if (!ULID.test(t.conversation_id)) return "conversation_id: a ULID is required";
  if (t.tool !== TOOL) return `tool: ${JSON.stringify(t.tool)} delivered on the subject of ${TOOL}`;
  if (typeof t.args !== "object" || t.args === null || Array.isArray(t.args)) return "args: a JSON object is required";
  if (t.deadline !== undefined && Number.isNaN(Date.parse(t.deadline))) return "deadline: an RFC 3339 timestamp is required";
  return "";
}

// nap sleeps ms, or less when aborted; it says how it ended.
function nap(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(signal.reason);
    const timer = setTimeout(() => resolve("done"), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(signal.reason);
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The pull loop: never more tasks than free slots.
const handlers = new Set();
let slotFreed = () => {};
let pull;
const loop = (async () => {
  while (!stopping) {
    const free = concurrency - handlers.size;
    if (free === 0) {
      await new Promise((r) => (slotFreed = r));
      continue;
    }
    try {
      pull = await consumer.fetch({ max_messages: free, expires: 1000 });
      for await (const m of pull) {
        const h = handle(m)
          .catch((err) => log("task failed", { error: String(err) }))
          .finally(() => {
            handlers.delete(h);
            slotFreed();
          });
        handlers.add(h);
      }
    } catch (err) {
      if (!stopping) {
        log("pull failed", { error: String(err) });
        await sleep(500);
      }
    }
  }
})();
log("worker started", { id: opts.id, tool: TOOL, ack_wait_ms: ackWaitMs, delivery_limit: deliveryLimit });

// Graceful stop (SIGTERM, SIGINT): pull no more, delete the registry entry,
// let running tasks finish within the grace period, then hand the rest back
// (nak) and flush before the connection closes.
let signals = 0;
const stop = async () => {
  if (signals++ > 0) return;
  stopping = true;
  log("worker stopping");
  // The pull is not stopped: stopping it would drop a task it received
  // and did not yet hand to the loop, which then waits out the ack wait
  // on the server. It ends by its expiry (1 s); a task it still yields is
  // handed back at once (handle naks it while stopping).
  slotFreed();
  clearInterval(refresh);
  await kv.delete(key).catch(() => {});
  const grace = sleep(Number(opts.grace) * 1000).then(() => "grace");
  if ((await Promise.race([Promise.all(handlers).then(() => "done"), grace])) === "grace") {
    for (const ac of running.values()) ac.abort("shutdown");
  }
  await Promise.all(handlers);
  await loop;
  await nc.drain(); // flushes the naks and acks
  log("worker stopped");
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);

function flags(args, defaults) {
  const out = { ...defaults };
  for (let i = 0; i < args.length; i++) {
    const name = args[i].replace(/^--?/, "");
    if (!(name in defaults) || i + 1 >= args.length) {
      console.error(`usage: node worker.mjs ${Object.keys(defaults).map((k) => `[--${k} V]`).join(" ")}`);
      process.exit(2);
    }
    out[name] = args[++i];
  }
  return out;
}
