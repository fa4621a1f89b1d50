// An example app (and the one the integration test runs): a workflow whose turns a Python engine
// sends to this Node worker. Environment: RUNLANE_REDIS_URL, RUNLANE_PREFIX, and
// RUNLANE_FERNET_KEYS (comma-separated, the engines' keys) when the engines encrypt payloads.
import { Fernet, Worker } from "./runlane-worker.js";

const url = process.env.RUNLANE_REDIS_URL ?? "redis://127.0.0.1:6379/0";
const prefix = process.env.RUNLANE_PREFIX ?? "runlane";
const keys = process.env.RUNLANE_FERNET_KEYS;
const codec = keys ? new Fernet(keys.split(",")) : null;

const steps = {
  "js.greet": async (name) => `hello ${name}`,
  "js.shout": async (text) => text.toUpperCase(),
  // A step's second argument is its context: its fence goes to the system it writes to.
  "js.stamp": async (input, step) => ({ input, step: step.stepId, fence: step.fence }),
};

const workflows = {
  // A child workflow, also decided here.
  "js-child": async (ctx, input) => ctx.step("js.shout", input),

  "js-order": async (ctx, input) => {
    const greeting = await ctx.step("js.greet", input.name); // local: runs inside the turn
    // A change made while runs were in flight: the runs recorded before it shout in the turn.
    const loud = ctx.patched("remote-shout")
      ? await ctx.step("js.shout", greeting, { group: "node-steps" }) // remote step
      : greeting.toUpperCase();
    await ctx.sleep(0.2);
    const said = await ctx.waitForSignal("ship");
    ctx.setAttributes({ customer: input.name, shipped: said }); // what list_runs filters on
    const child = await ctx.child("js-child", said);
    return { greeting, loud, said, child, pid: process.pid };
  },

  // Waits until signalled "done"; started by js-keeper.
  "js-waiter": async (ctx) => ctx.waitForSignal("done"),

  // Two children: the first detached (a cancel of this run leaves it running), the second not.
  "js-keeper": async (ctx) => {
    const kept = await ctx.startChild("js-waiter", null, { detached: true });
    const tied = await ctx.startChild("js-waiter", null);
    await ctx.waitForSignal("done");
    return { kept, tied };
  },

  // Answers updates "ask" (the question shouted back); an empty question is rejected.
  "js-desk": async (ctx, rounds) => {
    const asked = [];
    for (let n = 0; n < rounds; n++) {
      const update = await ctx.waitForUpdate("ask");
      asked.push(update.payload);
      if (update.payload) await ctx.reply(update, await ctx.step("js.shout", update.payload));
      else await ctx.reply(update, null, { error: "an empty question" });
    }
    return asked;
  },
};

const crew = [
  new Worker({ group: "node-wf", url, prefix, workflows, steps, heartbeatInterval: 0.2, codec }),
  new Worker({ group: "node-steps", url, prefix, steps, heartbeatInterval: 0.2, codec }),
];
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => crew.forEach((w) => w.stop()));
}
console.error(`runlane node worker ${process.pid}: ${crew.map((w) => w.group).join(", ")}`);
await Promise.all(crew.map((w) => w.run()));
