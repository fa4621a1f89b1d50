"""runlane against the PostgreSQL job queues that serialise by key: procrastinate, graphile-worker
and pg-boss (issue 40). Alternating sides, a fresh database per side and phase, medians.

    .venv/bin/python benchmarks/queues.py [--quick] [--reps 3] [--phases throughput,perkey,hotkey,latency]

Phases: ``throughput`` (N one-step runs vs N jobs, enqueue all, wait for all), ``perkey`` (KEYS x
PER_KEY, one at a time per key, a 2 ms step: total time, FIFO violations, overlaps), ``hotkey``
(one key, PER_KEY queued) and ``latency`` (enqueue -> done, one at a time).

Every side is a process speaking one protocol (``benchmarks/peers/node/driver.mjs`` says it):
it connects and prints ``READY``; this process marks the server (the CPU of the PostgreSQL
backends serving the side's database, the WAL position) and writes a line; the side runs the
phase and prints ``RESULT {json}`` with its wall time and its own CPU; this process marks the
server again and lets the side stop. Durable commits are ``pg_stat_database.xact_commit`` of the
side's database from before the process started to after it exited (backends flush their
statistics when they exit), less a side's idle open and close measured the same way. WAL is
the whole cluster's: other databases' writes count too, so a loaded machine inflates it.

runlane's side runs in this file (``--side runlane``), in ``.venv``; procrastinate in
``.queues-venv`` (``benchmarks/queues-requirements.txt``), graphile-worker and pg-boss in Node
from ``benchmarks/peers/node/`` (``npm ci``). Figures go to ``benchmarks/results/queues.json``
(``--out``), which ``benchmarks/report.py`` renders into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from peers.peerkit import backend_jiffies

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = ROOT / "benchmarks" / "peers" / "node"
PHASES = ("throughput", "perkey", "hotkey", "latency")
FULL = {"reps": 3, "n": 1000, "keys": 50, "per_key": 20, "hot": 20, "runs": 50}
QUICK = {"reps": 1, "n": 200, "keys": 10, "per_key": 5, "hot": 5, "runs": 10}
OUT = ROOT / "benchmarks" / "results" / "queues.json"


# ---------------------------------------------------------------- the sides


@dataclass(frozen=True)
class Side:
    """A side of the comparison: how to start its driver (``argv`` + the driver's own flags)."""

    name: str
    argv: tuple[str, ...]

    def command(self, db: str, extra: Sequence[str]) -> list[str]:
        return [*self.argv, "--db", db, *extra]


RUNLANE = Side(
    "runlane", (str(ROOT / ".venv/bin/python"), str(Path(__file__)), "--side", "runlane")
)
# runlane again, its starts made ``BATCH`` at a time to an ``engine.start_many`` (everything
# else the same).
RUNLANE_BATCHED = Side(
    "runlane-batched",
    (str(ROOT / ".venv/bin/python"), str(Path(__file__)), "--side", "runlane", "--batched"),
)
PROCRASTINATE = Side(
    "procrastinate",
    (str(ROOT / ".queues-venv/bin/python"), str(ROOT / "benchmarks/peers/procrastinate_driver.py")),
)
GRAPHILE = Side("graphile-worker", ("node", str(NODE_DIR / "driver.mjs"), "--peer", "graphile"))
PGBOSS = Side("pg-boss", ("node", str(NODE_DIR / "driver.mjs"), "--peer", "pgboss"))
SIDES = (RUNLANE, RUNLANE_BATCHED, PROCRASTINATE, GRAPHILE, PGBOSS)


def phase_flags(phase: str, plan: dict[str, int]) -> list[str]:
    per_key = plan["hot"] if phase == "hotkey" else plan["per_key"]
    sizes = {"n": plan["n"], "keys": plan["keys"], "per-key": per_key, "runs": plan["runs"]}
    return ["--phase", phase, *(x for k, v in sizes.items() for x in (f"--{k}", str(v)))]


# ---------------------------------------------------------------- the server's figures


def database_name(side: Side) -> str:
    return "queues_" + side.name.replace("-", "_")


def admin(sql: str, *params: Any) -> Any:
    import psycopg

    with psycopg.connect(common.PG_ADMIN, autocommit=True) as conn:
        cursor = conn.execute(sql, params or None)
        return cursor.fetchone() if cursor.description else None


def commits(db: str) -> int:
    row = admin("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", db)
    return int(row[0]) if row else 0


def settled_commits(db: str) -> int:
    previous = commits(db)
    for _ in range(40):
        time.sleep(0.25)
        current = commits(db)
        if current == previous:
            return current
        previous = current
    return previous


def wal_lsn() -> str:
    return str(admin("SELECT pg_current_wal_lsn()")[0])


def wal_since(lsn: str) -> int:
    return int(admin("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", lsn)[0])


def server_jiffies(db: str) -> dict[int, int]:
    return backend_jiffies(db)


def read_line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    """The driver's next line starting with ``prefix`` (other output is its logging)."""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"driver exited (code {proc.wait()}) before {prefix}")
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise TimeoutError(f"no {prefix} within {timeout:.0f}s")


def measure(side: Side, phase: str, plan: dict[str, int]) -> dict[str, Any]:
    """One side, one phase, on a database of its own: the driver's figures and the server's."""
    db = database_name(side)
    admin(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    admin(f"CREATE DATABASE {db}")
    try:
        subprocess.run(side.command(db, ["--setup"]), check=True, capture_output=True, timeout=120)
        commits0 = settled_commits(db)
        proc = subprocess.Popen(
            side.command(db, phase_flags(phase, plan)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        figures = drive(proc, db)
        figures["commits_per_job"] = (settled_commits(db) - commits0) / figures["jobs"]
        return {"side": side.name, "phase": phase, **figures}
    finally:
        admin(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def drive(proc: subprocess.Popen[str], db: str) -> dict[str, Any]:
    assert proc.stdin is not None
    try:
        read_line(proc, "READY", 120)
        jiffies0, lsn0, load = server_jiffies(db), wal_lsn(), common.load_avg()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        figures: dict[str, Any] = json.loads(read_line(proc, "RESULT", 900))
        jiffies1, wal = server_jiffies(db), wal_since(lsn0)
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    hz, jobs = os.sysconf("SC_CLK_TCK"), figures["jobs"]
    server = sum(j - jiffies0.get(pid, 0) for pid, j in jiffies1.items())
    figures["server_cpu_ms_per_job"] = server * 1000 / hz / jobs
    figures["wal_bytes_per_job"] = wal / jobs
    figures["load_before"] = load
    return figures


# ---------------------------------------------------------------- runlane's side


async def enqueue_runs(engine: Any, workflow: Any, inputs: Sequence[Any]) -> list[str]:
    """Start one run per input, one ``engine.start`` after another: the enqueue loop."""
    return [(await engine.start(workflow, i)).id for i in inputs]


BATCH = 25


async def enqueue_runs_batched(engine: Any, workflow: Any, inputs: Sequence[Any]) -> list[str]:
    """The same starts, ``BATCH`` to an ``engine.start_many`` (one round trip each on
    PostgreSQL); a refused start raises, as ``engine.start`` would."""
    from runlane import Start

    ids = []
    for i in range(0, len(inputs), BATCH):
        outcomes = await engine.start_many([Start(workflow, x) for x in inputs[i : i + BATCH]])
        ids += [outcome.result().id for outcome in outcomes]
    return ids


async def runlane_side(args: argparse.Namespace) -> None:
    """runlane as a driver: the same protocol and phases as the peers' drivers."""
    import workloads

    target = workloads.Target(
        "pg", Path("/tmp"), url=common.PG_URL.rsplit("/", 1)[0] + "/" + args.db
    )
    probe = workloads.KeyProbe()
    keyed = workloads.keyed_workflow(probe, args.step_ms)
    async with target.engine(workloads.steps_wf, keyed) as engine:
        if args.setup:
            return
        print("READY", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        cpu0 = time.process_time()
        figures = await runlane_phase(args, engine, probe, keyed)
        figures["client_cpu_ms_per_job"] = (time.process_time() - cpu0) * 1000 / figures["jobs"]
        print("RESULT " + json.dumps(figures), flush=True)
        await asyncio.to_thread(sys.stdin.readline)


async def runlane_phase(
    args: argparse.Namespace, engine: Any, probe: Any, keyed: Any
) -> dict[str, Any]:
    import workloads

    if args.phase == "latency":
        samples = [await workloads.one_run_ms(engine, 1) for _ in range(args.runs + 5)][5:]
        return {"jobs": args.runs, "median_ms": statistics.median(samples)} | {
            "p99_ms": common.pct(samples, 0.99),
            "min_ms": min(samples),
            "max_ms": max(samples),
        }
    if args.phase == "throughput":
        inputs: list[Any] = [1] * args.n
        workflow, wait = workloads.steps_wf, workloads.wait_all
    else:
        keys = 1 if args.phase == "hotkey" else args.keys
        inputs = [
            {"key": f"key-{k:03d}", "seq": j} for j in range(args.per_key) for k in range(keys)
        ]
        probe.expected = len(inputs)
        workflow = keyed

        async def wait(engine: Any, ids: Sequence[str]) -> None:
            runs = await workloads.wait_settled(engine, probe, ids)
            order = {rid: (r.created_at, rid) for rid, r in runs.items()}
            checks.update(workloads.serialisation_checks(probe, order))

    checks: dict[str, Any] = {}
    t0 = time.perf_counter()
    enqueue = enqueue_runs_batched if getattr(args, "batched", False) else enqueue_runs
    ids = await enqueue(engine, workflow, inputs)
    enqueued = time.perf_counter()
    await wait(engine, ids)
    t1 = time.perf_counter()
    return {
        "jobs": len(ids),
        "seconds": t1 - t0,
        "enqueue_seconds": enqueued - t0,
        "tail_seconds": t1 - enqueued,
        **{
            k: checks[k] for k in ("overlapping_pairs", "fifo_violations_within_key") if k in checks
        },
    }


# ---------------------------------------------------------------- the session


def available(side: Side) -> str:
    """Why ``side`` cannot run here ("" when it can)."""
    if side is PROCRASTINATE and not Path(side.argv[0]).exists():
        return "no .queues-venv (make bench-queues builds it)"
    if side in (GRAPHILE, PGBOSS):
        if not shutil.which("node"):
            return "no node on PATH"
        if not (NODE_DIR / "node_modules").is_dir():
            return "no benchmarks/peers/node/node_modules (npm ci there)"
    return ""


def session(
    plan: dict[str, int], phases: Sequence[str], sides: Sequence[Side]
) -> list[dict[str, Any]]:
    """Each phase, ``reps`` times, the sides in turn; each repetition rotates who goes first."""
    lines = []
    for rep in range(plan["reps"]):
        for phase in phases:
            order = list(sides[rep % len(sides) :]) + list(sides[: rep % len(sides)])
            for side in order:
                print(f"--> {side.name} {phase} rep {rep + 1}", flush=True)
                try:
                    line = {"rep": rep + 1, **measure(side, phase, plan)}
                except Exception as exc:  # one side failing leaves the others' figures
                    line = {"rep": rep + 1, "side": side.name, "phase": phase, "error": str(exc)}
                print(f"    {json.dumps(line)}", flush=True)
                lines.append(line)
    return lines


def summary(lines: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per phase and side: the median of each figure, and its range."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for phase in PHASES:
        for side in SIDES:
            reps = [x for x in lines if x["phase"] == phase and x["side"] == side.name]
            good = [x for x in reps if "error" not in x]
            if not reps:
                continue
            figures: dict[str, Any] = {
                "reps": len(good),
                "errors": [x["error"] for x in reps if "error" in x],
            }
            for key in good[0] if good else ():
                values = [x[key] for x in good if isinstance(x.get(key), (int, float))]
                if values and key not in ("rep", "jobs"):
                    figures[key] = statistics.median(values)
                    figures[key + "_range"] = [min(values), max(values)]
            out.setdefault(phase, {})[side.name] = figures
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", default=os.environ.get("QUICK") == "1")
    p.add_argument("--reps", type=int, default=0)
    p.add_argument("--phases", default=",".join(PHASES))
    p.add_argument("--sides", default="", help="e.g. runlane,graphile-worker (default all)")
    p.add_argument("--out", default="", help=f"default {OUT.relative_to(ROOT)}; quick: /tmp")
    # The driver's flags, when this file runs as runlane's side.
    p.add_argument("--side", default="")
    p.add_argument("--db", default="")
    p.add_argument("--setup", action="store_true")
    p.add_argument("--batched", action="store_true", help="runlane's starts by start_many")
    p.add_argument("--phase", default="throughput")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--per-key", type=int, default=20)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--step-ms", type=float, default=2.0)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.side == "runlane":
        asyncio.run(runlane_side(args))
        return
    plan = dict(QUICK if args.quick else FULL)
    plan["reps"] = args.reps or plan["reps"]
    wanted = args.sides.split(",") if args.sides else [s.name for s in SIDES]
    sides, skipped = [], {}
    for side in SIDES:
        if side.name in wanted:
            reason = available(side)
            if reason:
                skipped[side.name] = reason
            else:
                sides.append(side)
    facts = {
        "plan": plan,
        "skipped": skipped,
        "load_start": common.load_avg(),
        "machine": common.machine(),
    }
    t0 = time.monotonic()
    lines = session(plan, args.phases.split(","), sides)
    facts |= {"load_end": common.load_avg(), "wall_seconds": round(time.monotonic() - t0)}
    out = Path(args.out or ("/tmp/queues-quick.json" if args.quick else OUT))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"facts": facts, "summary": summary(lines), "lines": lines}, indent=1)
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
