// graphile-worker's and pg-boss's side of the job-queue workloads (benchmarks/queues.py).
//
//   node driver.mjs --peer graphile|pgboss --db NAME --setup
//   node driver.mjs --peer graphile|pgboss --db NAME --phase throughput|perkey|hotkey|latency [--n N]
//
// With --setup the driver installs the peer's schema (and pg-boss's queues) and exits, so the
// measured process only connects. Otherwise it starts the peer's worker, prints READY, waits
// for a line on stdin, runs the phase, prints RESULT {json}, waits for another line and stops:
// queues.py reads the server's figures (backends' CPU, WAL, commits) between the two lines.
import readline from "node:readline";
import pg from "pg";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1]?.startsWith("--") ? "1" : all[i + 1] ?? "1"]);
    return acc;
  }, []),
);
const num = (k, d) => (args[k] === undefined ? d : Number(args[k]));
const N = num("n", 1000), KEYS = num("keys", 50), PER_KEY = num("per-key", 20);
const STEP_MS = num("step-ms", 2), RUNS = num("runs", 50), CONCURRENCY = num("concurrency", 10);
const host = process.env.BENCH_PG_HOST ?? "127.0.0.1", user = process.env.BENCH_PG_USER ?? "postgres";
const connectionString = `postgres://${user}@${host}:5432/${args.db}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const stdin = readline.createInterface({ input: process.stdin });
const lines = stdin[Symbol.asyncIterator]();

// What the bodies saw: per key, [enter, leave, seq] in the order they entered.
const seen = new Map();
let finished = 0;
async function body(data) {
  const t0 = performance.now();
  if (data.key !== undefined) {
    if (!seen.has(data.key)) seen.set(data.key, []);
    const entry = [t0, null, data.seq];
    seen.get(data.key).push(entry);
    await sleep(STEP_MS);
    entry[1] = performance.now();
  }
  finished += 1;
}

// ------------------------------------------------------------------ the two peers

async function graphile() {
  const { run, runMigrations } = await import("graphile-worker");
  const options = { connectionString, concurrency: CONCURRENCY, noHandleSignals: true, pollInterval: 2000 };
  if (args.setup) return runMigrations(options);
  const runner = await run({ ...options, taskList: { job: async (payload) => body(payload) } });
  const pool = new pg.Pool({ connectionString, max: 1 });
  return {
    enqueue: async (data) => (await runner.addJob("job", data, data.key ? { queueName: data.key } : {})).id,
    // A job that succeeds is deleted from the jobs table.
    pending: async () => Number((await pool.query("SELECT count(*) AS c FROM graphile_worker._private_jobs")).rows[0].c),
    done: async (id) => (await pool.query("SELECT 1 FROM graphile_worker._private_jobs WHERE id = $1", [id])).rowCount === 0,
    stop: async () => { await runner.stop(); await pool.end(); },
  };
}

async function pgboss() {
  const { PgBoss } = await import("pg-boss").then((m) => ({ PgBoss: m.default ?? m.PgBoss }));
  const boss = new PgBoss({ connectionString, max: CONCURRENCY + 2, supervise: false, schedule: false });
  boss.on("error", () => {}); // a fetch refused by the singleton index is retried on the next poll
  await boss.start();
  if (args.setup) {
    await boss.createQueue("plain");
    await boss.createQueue("keyed", { name: "keyed", policy: "singleton" });
    return boss.stop({ graceful: false, wait: true });
  }
  for (const name of ["plain", "keyed"]) {
    for (let i = 0; i < CONCURRENCY; i++) {
      await boss.work(name, { batchSize: 1, pollingIntervalSeconds: 0.5 }, async ([job]) => body(job.data));
    }
  }
  const pool = new pg.Pool({ connectionString, max: 1 });
  return {
    enqueue: async (data) => boss.send(data.key ? "keyed" : "plain", data, data.key ? { singletonKey: data.key } : {}),
    pending: async () => Number((await pool.query("SELECT count(*) AS c FROM pgboss.job WHERE state <> 'completed'")).rows[0].c),
    done: async (id) => (await pool.query("SELECT state FROM pgboss.job WHERE id = $1", [id])).rows[0]?.state === "completed",
    stop: async () => { await boss.stop({ graceful: false, wait: true }); await pool.end(); },
  };
}

// ------------------------------------------------------------------ the workloads

async function untilDone(check, every) {
  while (!(await check())) await sleep(every);
}

async function batch(side, inputs) {
  const t0 = performance.now();
  for (const data of inputs) await side.enqueue(data);
  const enqueued = performance.now();
  await untilDone(async () => finished >= inputs.length && (await side.pending()) === 0, 5);
  const t1 = performance.now();
  return { jobs: inputs.length, seconds: (t1 - t0) / 1000, enqueue_seconds: (enqueued - t0) / 1000, tail_seconds: (t1 - enqueued) / 1000 };
}

function keyedInputs(keys, perKey) {
  const inputs = [];
  for (let j = 0; j < perKey; j++) for (let k = 0; k < keys; k++) inputs.push({ key: `key-${String(k).padStart(3, "0")}`, seq: j });
  return inputs;
}

function checks() {
  let overlaps = 0, fifo = 0;
  for (const entries of seen.values()) {
    for (let i = 1; i < entries.length; i++) {
      overlaps += entries[i][0] < entries[i - 1][1] ? 1 : 0;
      fifo += entries[i][2] < entries[i - 1][2] ? 1 : 0;
    }
  }
  return { overlapping_pairs: overlaps, fifo_violations_within_key: fifo };
}

async function latency(side) {
  const samples = [];
  for (let i = 0; i < RUNS + 5; i++) {
    const t0 = performance.now();
    const id = await side.enqueue({ seq: i });
    await untilDone(() => side.done(id), 1);
    if (i >= 5) samples.push(performance.now() - t0);
  }
  samples.sort((a, b) => a - b);
  const at = (q) => samples[Math.min(samples.length - 1, Math.round(q * (samples.length - 1)))];
  return { jobs: RUNS, median_ms: at(0.5), p99_ms: at(0.99), min_ms: samples[0], max_ms: samples.at(-1) };
}

const PHASES = {
  throughput: (side) => batch(side, Array.from({ length: N }, (_, i) => ({ seq: i }))),
  perkey: async (side) => ({ ...(await batch(side, keyedInputs(KEYS, PER_KEY))), ...checks() }),
  hotkey: async (side) => ({ ...(await batch(side, keyedInputs(1, PER_KEY))), ...checks() }),
  latency,
};

const side = await (args.peer === "graphile" ? graphile() : pgboss());
if (!args.setup) {
  console.log("READY");
  await lines.next();
  const cpu0 = process.cpuUsage();
  const figures = await PHASES[args.phase](side);
  const cpu = process.cpuUsage(cpu0);
  figures.client_cpu_ms_per_job = (cpu.user + cpu.system) / 1000 / figures.jobs;
  console.log("RESULT " + JSON.stringify(figures));
  await lines.next();
  await side.stop();
}
stdin.close();
process.exit(0);
