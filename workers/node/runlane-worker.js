// A runlane worker in JavaScript (Node 20): remote steps and remote workflow turns over the
// Redis transport, written from docs/wire.md alone (wire protocol 1). It never touches the store.
//
//   const worker = new Worker({ group: "orders", url: "redis://127.0.0.1:6379/0",
//                               workflows: { order }, steps: { "app.prepare": prepare } });
//   await worker.run();
//
// With `codec` (a codec.js Fernet of the engines' keys), the payloads of tasks, results and
// decisions are encoded as the engines' (docs/wire.md, "Encoded payloads").
//
// A workflow body is `async (ctx, input) => output`; ctx offers step, sleep, waitForSignal,
// waitForUpdate and reply, child, startChild, now, setAttributes, patched and deprecatePatch.
// An operation that cannot finish in this turn throws a Suspend, which the body must not catch
// (it ends the turn).
//
// A step body is `async (input, step) => output`; `step` is its step context: runId, seq,
// stepId, name, attempt and fence (the fencing token: greater for each later execution of the
// step; pass it to the systems the step writes to, which refuse a lower one).

import { createClient } from "redis";
import os from "node:os";
import crypto from "node:crypto";
import { WireCodec } from "./codec.js";

export { Fernet, PayloadCodecError } from "./codec.js";

export const PROTOCOL = 1;

export class Suspend extends Error {
  constructor() {
    super("the turn waits (a runlane suspension; do not catch it)");
    this.name = "Suspend";
  }
}

export class NonDeterminismError extends Error {
  constructor(message) {
    super(message);
    this.name = "NonDeterminismError";
  }
}

export class StepFailed extends Error {
  constructor(error) {
    super(error?.message ?? "step failed");
    this.name = error?.type ?? "StepFailed";
    this.error = error;
  }
}

const NEWER_CODE_RETRY = 2.0; // seconds
const FENCES_KEPT = 10000; // the steps (and runs' turns) whose highest fence a worker remembers
const UPDATE_SIGNALS = "$update:"; // an update is buffered as a signal named so (docs/wire.md)
const iso = (ms) => new Date(ms).toISOString().replace("Z", "+00:00");
const TERMINAL = new Set(["completed", "failed", "cancelled", "dead"]);

function errorDoc(err) {
  if (err instanceof StepFailed && err.error) return err.error;
  return { type: err?.name ?? "Error", message: String(err?.message ?? err), fatal: Boolean(err?.fatal) };
}

// What an attribute may be (the engine drops a decision carrying anything else): a name that
// is a non-empty string, a string, a finite number (a whole one within a signed 64-bit
// integer) or a boolean; no NUL character.
function checkAttributes(attributes) {
  if (attributes === null || typeof attributes !== "object" || Array.isArray(attributes)) {
    throw new TypeError("setAttributes takes an object of names to strings, numbers or booleans");
  }
  for (const [name, value] of Object.entries(attributes)) {
    const text = typeof value === "string";
    const number = typeof value === "number" && Number.isFinite(value)
      && (!Number.isInteger(value) || Math.abs(value) < 2 ** 63);
    if (!name || name.includes("\0") || !(text || number || typeof value === "boolean")
        || (text && value.includes("\0"))) {
      throw new TypeError(`attribute ${JSON.stringify(name)}: ${JSON.stringify(value)} is no attribute value`);
    }
  }
}

// A step's context, as its body's second argument (the Python worker's runlane.step_context()).
function stepContext(runId, seq, name, attempt, fence) {
  return { runId, seq, stepId: `${runId}:${seq}`, name, attempt, fence: fence ?? 0 };
}

// The highest fence taken per key: a task whose fence is not above it was sent again since (or
// is a copy of one taken already) and is not started. A task without a fence always is.
class FenceBook {
  constructor(size = FENCES_KEPT) {
    this.size = size;
    this.highest = new Map();
  }

  admits(key, fence) {
    if (typeof fence !== "number") return true;
    const seen = this.highest.get(key);
    if (seen !== undefined && fence <= seen) return false;
    this.highest.delete(key); // re-inserted last: the most recently seen stay
    this.highest.set(key, fence);
    if (this.highest.size > this.size) this.highest.delete(this.highest.keys().next().value);
    return true;
  }
}

// ------------------------------------------------------------------ replay of one turn

class Turn {
  constructor(task, steps) {
    this.task = task;
    this.steps = steps;
    this.history = new Map((task.history ?? []).map((r) => [r.seq, r]));
    this.signals = [...(task.signals ?? [])];
    this.children = task.children ?? {};
    this.seq = 0;
    this.lastRecorded = Math.max(0, ...this.history.keys());
    this.patches = new Map();
    this.replied = new Set(); // the updates this body answered (each once)
    this.written = new Map();
    this.consumed = [];
    this.commands = [];
    this.wakes = [];
  }

  next() {
    this.seq += 1;
    return this.seq;
  }

  recorded(seq, kind, name) {
    const record = this.written.get(seq) ?? this.history.get(seq);
    if (record && record.kind === "patch" && kind !== "patch") {
      // Newer code (mid-deploy) recorded a patch this code does not know: leave the run to a
      // worker that has it, due again in 2 s, rather than fail it.
      this.wait(iso(Date.now() + NEWER_CODE_RETRY * 1000));
    }
    if (record && (record.kind !== kind || record.name !== name)) {
      throw new NonDeterminismError(
        `run ${JSON.stringify(this.task.run_id)} op #${seq}: history has ${record.kind} ` +
          `${JSON.stringify(record.name)}, the code now does ${kind} ${JSON.stringify(name)}`,
      );
    }
    return record;
  }

  write(seq, kind, name, status, fields = {}) {
    const prior = this.written.get(seq) ?? this.history.get(seq);
    const now = Date.now();
    const done = status === "completed" || status === "failed";
    this.written.set(seq, {
      seq, kind, name, status,
      input: fields.input ?? prior?.input ?? null,
      output: fields.output ?? null,
      error: fields.error ?? null,
      attempts: fields.attempts ?? prior?.attempts ?? 0,
      started_at: prior?.started_at ?? iso(now),
      finished_at: done ? iso(now) : null,
      wake_at: fields.wake_at ?? null,
    });
  }

  wait(wakeAt) {
    if (wakeAt) this.wakes.push(wakeAt);
    throw new Suspend();
  }

  context() {
    const turn = this;
    return {
      runId: turn.task.run_id,
      input: turn.task.input,
      attempt: turn.task.attempt,
      step: (name, input = null, options = {}) => turn.step(name, input, options),
      sleep: (seconds) => turn.sleep(seconds),
      waitForSignal: (name) => turn.waitForSignal(name),
      waitForUpdate: (name) => turn.waitForUpdate(name),
      reply: (update, value = null, options = {}) => turn.reply(update, value, options),
      child: (workflow, input = null, options = {}) => turn.child(workflow, input, options, "child"),
      startChild: (workflow, input = null, options = {}) =>
        turn.child(workflow, input, options, "start_child"),
      now: () => turn.now(),
      setAttributes: (attributes) => turn.setAttributes(attributes),
      patched: (changeId) => turn.patched(changeId),
      deprecatePatch: (changeId) => turn.deprecatePatch(changeId),
    };
  }

  // A code change under runs in flight (docs/wire.md, "Patches"): the marker at the next
  // position, or no history left there, takes the new branch (recording the marker when
  // fresh); any other operation there is a history from before the change: the old branch,
  // and the position stays that operation's. Same answer for a change id all turn long.
  patched(changeId) {
    if (this.patches.has(changeId)) return this.patches.get(changeId);
    const seq = this.seq + 1;
    const record = this.written.get(seq) ?? this.history.get(seq);
    const fresh = !record && seq > this.lastRecorded;
    const marked = record?.kind === "patch" && record.name === changeId;
    if (fresh) this.write(seq, "patch", changeId, "completed");
    if (fresh || marked) this.seq = seq;
    this.patches.set(changeId, fresh || marked);
    return fresh || marked;
  }

  // A change every run in flight took, its old branch deleted: skip its marker if it is here.
  deprecatePatch(changeId) {
    const record = this.written.get(this.seq + 1) ?? this.history.get(this.seq + 1);
    if (record?.kind === "patch" && record.name === changeId) this.seq += 1;
  }

  async step(name, input, { group = null, retry = null } = {}) {
    const seq = this.next();
    const record = this.recorded(seq, "step", name);
    if (record?.status === "completed") return record.output;
    if (record?.status === "failed") throw new StepFailed(record.error);
    if (group) {
      this.commands.push({ type: "step", seq, name, group, input, timeout: null, retry });
      this.wait(null);
    }
    if (record?.wake_at && Date.parse(record.wake_at) > Date.now()) this.wait(record.wake_at);
    const attempt = (record?.attempts ?? 0) + 1;
    const body = this.steps[name];
    try {
      if (!body) throw Object.assign(new Error(name), { name: "UnknownStepError" });
      const step = stepContext(this.task.run_id, seq, name, attempt, this.task.fence);
      const output = (await body(input, step)) ?? null;
      this.write(seq, "step", name, "completed", { input, output, attempts: attempt });
      return output;
    } catch (err) {
      const max = retry?.max_attempts ?? 1;
      if (attempt < max && !err?.fatal) {
        const delay = Math.min(retry.max_backoff ?? 60, (retry.backoff ?? 1) * 2 ** (attempt - 1));
        const wakeAt = iso(Date.now() + delay * 1000);
        this.write(seq, "step", name, "pending", { input, error: errorDoc(err), attempts: attempt, wake_at: wakeAt });
        this.wait(wakeAt);
      }
      this.write(seq, "step", name, "failed", { input, error: errorDoc(err), attempts: attempt });
      throw err;
    }
  }

  async sleep(seconds) {
    const seq = this.next();
    const record = this.recorded(seq, "sleep", "sleep");
    if (record?.status === "completed") return;
    const wakeAt = record?.wake_at ?? iso(Date.now() + seconds * 1000);
    if (Date.parse(wakeAt) <= Date.now()) {
      this.write(seq, "sleep", "sleep", "completed", { wake_at: wakeAt });
      return;
    }
    if (!record) this.write(seq, "sleep", "sleep", "pending", { wake_at: wakeAt });
    this.wait(wakeAt);
  }

  async waitForSignal(name) {
    return this.waitFor("signal", name, name);
  }

  // The oldest update `name` sent to the run: { name, payload, id }. Its caller waits for reply.
  async waitForUpdate(name) {
    const message = await this.waitFor("update", name, UPDATE_SIGNALS + name);
    return { name, payload: message?.payload ?? null, id: String(message?.id ?? "") };
  }

  // Takes the oldest buffered signal named `buffered` for a `kind` wait, or waits for one.
  async waitFor(kind, name, buffered) {
    const seq = this.next();
    const record = this.recorded(seq, kind, name);
    if (record?.status === "completed") return record.output;
    if (record?.status === "failed") {
      const timeout = kind === "update" ? "UpdateTimeoutError" : "SignalTimeoutError";
      throw Object.assign(new Error(`no ${kind} ${name}`), { name: timeout });
    }
    const at = this.signals.findIndex((s) => s.name === buffered);
    if (at >= 0) {
      const [signal] = this.signals.splice(at, 1);
      this.write(seq, kind, name, "completed", { output: signal.payload ?? null });
      this.consumed.push(signal.id);
      return signal.payload ?? null;
    }
    if (!record) this.write(seq, kind, name, "pending");
    this.wait(null);
  }

  // Answers an update with `value`, or rejects it with `{ error: "why" }` as the options. The
  // reply is durable only once the engine applies this turn's decision: the turn ends here
  // (due again at once), so the caller has its answer before the body goes on.
  async reply(update, value, { error = null } = {}) {
    if (this.replied.has(update.id)) {
      throw new Error(`update ${JSON.stringify(update.name)} (${update.id}) was answered already`);
    }
    this.replied.add(update.id);
    const seq = this.next();
    if (this.recorded(seq, "reply", update.name)) return; // answered on an earlier turn
    const input = { update: update.id };
    if (error === null || error === undefined) {
      this.write(seq, "reply", update.name, "completed", { input, output: value ?? null });
    } else {
      const rejection = { type: "UpdateRejectedError", message: String(error) };
      this.write(seq, "reply", update.name, "failed", { input, error: rejection });
    }
    this.wait(iso(Date.now()));
  }

  async child(workflow, input, { runId = null, detached = false } = {}, kind) {
    const seq = this.next();
    const record = this.recorded(seq, kind, workflow);
    if (record?.status === "completed") return record.output;
    if (record?.status === "failed") throw new StepFailed(record.error);
    if (record) {
      const outcome = this.children[record.input?.child_id];
      if (!outcome || !TERMINAL.has(outcome.status)) this.wait(null);
      if (outcome.status === "completed") {
        this.write(seq, kind, workflow, "completed", { output: outcome.output ?? null });
        return outcome.output ?? null;
      }
      const error = { type: "ChildFailedError", message: `child run ended ${outcome.status}`, cause: outcome.error ?? null };
      this.write(seq, kind, workflow, "failed", { error });
      throw new StepFailed(error);
    }
    const childId = runId ?? `${this.task.run_id}.child.${seq}`;
    const command = { type: "child", seq, kind, workflow, input, child_id: childId };
    if (detached && kind === "start_child") command.detached = true;
    this.commands.push(command);
    if (kind === "start_child") return childId;
    this.wait(null);
  }

  now() {
    const seq = this.next();
    const record = this.recorded(seq, "now", "now");
    if (record?.status === "completed") return new Date(record.output);
    const value = iso(Date.now());
    this.write(seq, "now", "now", "completed", { output: value });
    return new Date(value);
  }

  // Attributes that index the run (docs/wire.md): recorded once, in the turn that sets them;
  // a replay finds the record and sets nothing again. The engine merges them into the run's.
  setAttributes(attributes) {
    checkAttributes(attributes);
    const seq = this.next();
    const record = this.recorded(seq, "attributes", "attributes");
    if (!record) this.write(seq, "attributes", "attributes", "completed", { output: { ...attributes } });
  }

  async decide(body) {
    let outcome;
    try {
      const output = await body(this.context(), this.task.input);
      outcome = { type: "complete", output: output ?? null };
    } catch (err) {
      if (err instanceof Suspend) {
        const wakes = this.wakes.map((w) => Date.parse(w));
        outcome = { type: "suspend", wake_at: wakes.length ? iso(Math.min(...wakes)) : null };
      } else {
        outcome = { type: "fail", error: errorDoc(err) };
      }
    }
    const startChildren = new Set(this.commands.filter((c) => c.type === "child").map((c) => c.seq));
    return {
      checkpoints: [...this.written.values()].filter((r) => !startChildren.has(r.seq)),
      consumed_signals: this.consumed,
      commands: this.commands,
      outcome,
    };
  }
}

// ------------------------------------------------------------------ the worker

export class Worker {
  constructor({ group, url = "redis://127.0.0.1:6379/0", prefix = "runlane", workflows = {}, steps = {},
                heartbeatInterval = 2.0, concurrency = 8, name = null, codec = null }) {
    this.group = group;
    this.wire = new WireCodec(codec);
    this.prefix = prefix;
    this.workflows = workflows;
    this.steps = steps;
    this.heartbeatInterval = heartbeatInterval;
    this.concurrency = concurrency;
    this.name = name ?? `${os.hostname()}:${process.pid}:${crypto.randomBytes(3).toString("hex")}`;
    this.taker = createClient({ url });
    this.sender = createClient({ url });
    this.inFlight = new Set();
    this.stopping = false;
    this.fences = new FenceBook();
  }

  key(name) {
    return `${this.prefix}:${name}`;
  }

  descriptor() {
    return {
      protocol: PROTOCOL, kind: "worker", worker: this.name, group: this.group, language: "node",
      version: process.version, workflows: Object.keys(this.workflows).sort(),
      steps: Object.keys(this.steps).sort(), concurrency: this.concurrency, at: iso(Date.now()),
    };
  }

  async run() {
    await Promise.all([this.taker.connect(), this.sender.connect()]);
    // Tell every engine who joined the group, and which protocol it speaks (docs/wire.md);
    // again every ten heartbeat intervals, for the engines that start later.
    const announce = () => this.sender
      .publish(this.key("heartbeats"), JSON.stringify(this.descriptor())).catch(() => {});
    await announce();
    const announcing = setInterval(announce, this.heartbeatInterval * 10 * 1000);
    while (!this.stopping) {
      const free = this.concurrency - this.inFlight.size;
      if (free <= 0) {
        await Promise.race(this.inFlight);
        continue;
      }
      const reply = await this.taker.sendCommand(
        ["BLMPOP", "1", "1", this.key(`tasks:${this.group}`), "LEFT", "COUNT", String(free)]);
      for (const raw of reply ? reply[1] : []) this.start(raw);
    }
    clearInterval(announcing);
    await Promise.allSettled(this.inFlight);
    await Promise.all([this.taker.quit(), this.sender.quit()]);
  }

  stop() {
    this.stopping = true;
  }

  start(raw) {
    let task;
    try {
      task = JSON.parse(raw);
      if (typeof task !== "object" || task === null) throw new Error("not an object");
      if ((task.protocol ?? 1) !== PROTOCOL) throw new Error(`protocol ${task.protocol}`);
    } catch (err) {
      console.warn(`runlane worker ${this.name}: dropping a malformed task (${err.message})`);
      return;
    }
    const key = task.kind === "workflow" ? `turn:${task.run_id}` : `step:${task.run_id}:${task.seq}`;
    if (!this.fences.admits(key, task.fence)) {
      console.warn(`runlane worker ${this.name}: dropping ${key} under fence ${task.fence} (a newer one was taken)`);
      return;
    }
    const work = (task.kind === "workflow" ? this.turn(task) : this.execute(task))
      .catch((err) => console.error(`runlane worker ${this.name}:`, err))
      .finally(() => this.inFlight.delete(work));
    this.inFlight.add(work);
  }

  async beating(beat, work) {
    const publish = () => this.sender
      .publish(this.key("heartbeats"), JSON.stringify({ ...beat, at: iso(Date.now()) }))
      .catch(() => {}); // a lost beat only narrows the engine's margin
    await publish();
    const timer = setInterval(publish, this.heartbeatInterval * 1000);
    try {
      return await work();
    } finally {
      clearInterval(timer);
    }
  }

  async execute(task) {
    // Results and beats repeat the step, its attempt and its fence (when the task had one).
    const identity = { step_id: task.step_id, run_id: task.run_id, seq: task.seq, attempt: task.attempt };
    if (typeof task.fence === "number") identity.fence = task.fence;
    const beat = { protocol: PROTOCOL, ...identity, worker: this.name };
    const step = stepContext(task.run_id, task.seq, task.name, task.attempt, task.fence);
    const result = await this.beating(beat, async () => {
      const body = this.steps[task.name];
      try {
        if (!body) throw Object.assign(new Error(task.name), { name: "UnknownStepError" });
        const { input } = this.wire.openTask(task);
        return { ok: true, output: (await body(input, step)) ?? null, error: null };
      } catch (err) {
        return { ok: false, output: null, error: errorDoc(err) };
      }
    });
    const message = { protocol: PROTOCOL, ...identity, ...result, worker: this.name };
    await this.send(this.wire.sealResult(message));
  }

  async turn(task) {
    if (task.expires_at && Date.parse(task.expires_at) < Date.now()) return; // sent again since
    const beat = { protocol: PROTOCOL, kind: "workflow", task_id: task.task_id, run_id: task.run_id, worker: this.name };
    const decision = await this.beating(beat, async () => {
      const body = this.workflows[task.workflow];
      const failed = (error) => ({ checkpoints: [], consumed_signals: [], commands: [], outcome: { type: "fail", error } });
      if (!body) return failed({ type: "UnknownWorkflowError", message: task.workflow });
      let opened;
      try {
        opened = this.wire.openTask(task);
      } catch (err) {
        return failed(errorDoc(err)); // another key: the run fails, naming itself
      }
      return new Turn(opened, this.steps).decide(body);
    });
    // To the queue the task names (only the engines that serve the run's code take it).
    const message = {
      protocol: PROTOCOL, kind: "decision", task_id: task.task_id, run_id: task.run_id,
      worker: this.name, ...decision,
    };
    await this.send(this.wire.sealResult(message), task.reply_to ?? "results");
  }

  async send(message, queue = "results") {
    await this.sender.rPush(this.key(queue), JSON.stringify(message));
  }
}
