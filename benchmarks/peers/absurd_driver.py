"""Absurd's side of the compared workloads (run in ``.absurd-venv``: the ``absurd-sdk`` package).

    .absurd-venv/bin/python benchmarks/peers/absurd_driver.py --schema ../shared/peers/absurd/absurd.sql

Absurd is a durable execution engine that lives in PostgreSQL (schema ``absurd``: a set of
tables per queue and stored procedures); its Python SDK only calls those procedures and does not
ship them, so the schema file is applied to a fresh database (``absurd_bench``) first.

- ``throughput``: ``--n`` tasks of ``--steps`` trivial checkpointed steps (``ctx.step``), all
  spawned from this process while ``--workers`` worker threads, each with its own SDK client and
  connection, claim and run them (``work_batch``, ``--batch`` tasks per claim); timed from the
  first spawn until every task is completed. The SDK's own ``start_worker`` shares one
  connection between its threads (or its asyncio tasks), which serialises them: hence one client
  per worker thread. A worker that finds nothing sleeps ``--poll`` seconds (the SDK's default is
  0.25; Absurd has no wake-up notification, workers poll).
- ``latency``: one task of ``--seq-steps`` sequential steps, ``--seq-runs`` times: the caller
  spawns it and claims and runs it at once (``work_batch``), so no poll interval is in the
  figure: Absurd's best case. Median / p99 / min / max ms, spawn -> completed.

Statements are counted client-side per ``absurd.*`` procedure (each is one autocommit
transaction, so statements = commits); claims that found nothing are counted apart.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import threading
import time
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerkit

DB = os.environ.get("BENCH_ABSURD_DB", "absurd_bench")  # another name: benches side by side
QUEUE = "bench"
TASK = "bench_chain"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=["pg"], default="pg", help="Absurd runs on PostgreSQL only")
    p.add_argument("--phases", default="throughput,latency")
    p.add_argument("--schema", default="../shared/peers/absurd/absurd.sql")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seq-steps", type=int, default=10)
    p.add_argument("--seq-runs", type=int, default=50)
    p.add_argument("--workers", type=int, default=8, help="worker threads, one connection each")
    p.add_argument("--batch", type=int, default=1, help="tasks per claim")
    p.add_argument("--poll", type=float, default=0.01, help="a worker's sleep after an empty claim")
    p.add_argument("--watchdog", type=float, default=170.0)
    p.add_argument("--json", default="")
    return p.parse_args()


ARGS = parse_args()
peerkit.start_watchdog(ARGS.watchdog)

import psycopg  # noqa: E402
from absurd_sdk import Absurd  # noqa: E402

# ---------------------------------------------------------------- statement counts


class Statements:
    """Client statements by ``absurd.*`` procedure (every cursor execute in this process)."""

    NAME = re.compile(r"absurd\.(\w+)")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        original = psycopg.Cursor.execute
        tally = self.tally

        def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(cursor, query, *args, **kwargs)
            tally(str(query), cursor)
            return result

        psycopg.Cursor.execute = execute  # type: ignore[method-assign]

    def tally(self, query: str, cursor: Any) -> None:
        found = self.NAME.search(query)
        name = found.group(1) if found else "other"
        if name == "claim_task" and cursor.rowcount == 0:
            name = "claim_task (empty)"
        with self.lock:
            self.counts[name] += 1

    def take(self) -> Counter[str]:
        with self.lock:
            taken, self.counts = self.counts, Counter()
        return taken


STATEMENTS = Statements()

# ---------------------------------------------------------------- the task and the workers


def chain(params: dict[str, Any], ctx: Any) -> int:
    x = 0
    for _ in range(int(params["steps"])):
        x = ctx.step("add_one", lambda x=x: x + 1)  # repeated names become add_one#2, ...
    return x


def client() -> Absurd:
    absurd = Absurd(peerkit.pg_dsn(DB), queue_name=QUEUE)
    absurd.register_task(name=TASK, default_max_attempts=1)(chain)
    return absurd


class Pool:
    """Worker threads, each with its own client: claim a batch, run it, count what it ran."""

    def __init__(self, workers: int) -> None:
        self.done = 0
        self.cond = threading.Condition()
        self.running = True
        self.local = threading.local()
        self.threads = [
            threading.Thread(target=self.work, args=(i,), daemon=True) for i in range(workers)
        ]
        for thread in self.threads:
            thread.start()

    def work(self, index: int) -> None:
        absurd = client()
        self.local.ran = 0
        real = absurd._registry[TASK]["handler"]

        def counted(params: dict[str, Any], ctx: Any) -> int:
            self.local.ran += 1
            return int(real(params, ctx))

        absurd._registry[TASK]["handler"] = counted
        try:
            while self.running:
                self.local.ran = 0
                absurd.work_batch(f"w{index}", claim_timeout=120, batch_size=ARGS.batch)
                if self.local.ran:
                    with self.cond:  # work_batch returns once each task's complete_run is in
                        self.done += self.local.ran
                        self.cond.notify_all()
                else:
                    time.sleep(ARGS.poll)
        finally:
            absurd.close()

    def wait_for(self, total: int, timeout: float) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: self.done >= total, timeout):
                raise RuntimeError(f"only {self.done} of {total} tasks completed in {timeout}s")

    def stop(self) -> None:
        self.running = False
        for thread in self.threads:
            thread.join()


def spawn(absurd: Absurd, steps: int) -> str:
    return str(absurd.spawn(TASK, {"steps": steps})["task_id"])


def check(absurd: Absurd, task_ids: list[str], steps: int) -> None:
    for task_id in task_ids:
        snapshot = absurd.fetch_task_result(task_id)
        if snapshot is None or snapshot.state != "completed" or snapshot.result != steps:
            raise RuntimeError(f"task {task_id} ended {snapshot}")


def per_workflow(counts: Counter[str], n: int) -> dict[str, Any]:
    useful = {k: v for k, v in counts.items() if k != "claim_task (empty)"}
    return {
        "client_stmts_per_wf": round(sum(useful.values()) / n, 2),
        "client_commits_per_wf": round(sum(useful.values()) / n, 2),
        "empty_claims_per_wf": round(counts.get("claim_task (empty)", 0) / n, 2),
        "stmts_by_procedure_per_wf": {k: round(v / n, 2) for k, v in sorted(counts.items())},
    }


# ---------------------------------------------------------------- phases


def throughput(main: Absurd) -> dict[str, Any]:
    n, steps = ARGS.n, ARGS.steps
    pool = Pool(ARGS.workers)
    try:
        warm = [spawn(main, steps) for _ in range(20)]
        pool.wait_for(len(warm), 60)
        base = pool.done
        STATEMENTS.take()
        cpu0, t0 = peerkit.CpuMark(DB), time.perf_counter()
        ids = [spawn(main, steps) for _ in range(n)]
        started = time.perf_counter()
        pool.wait_for(base + n, max(30.0, ARGS.watchdog - 30))
        elapsed = time.perf_counter() - t0
        cpu = peerkit.CpuMark(DB).since(cpu0, n)
        counts = STATEMENTS.take()
    finally:
        pool.stop()
    check(main, ids, steps)
    figures = {
        "n": n,
        "steps": steps,
        "workers": ARGS.workers,
        "claim_batch": ARGS.batch,
        "poll_seconds": ARGS.poll,
        "seconds": round(elapsed, 3),
        "start_loop_seconds": round(started - t0, 3),
        "workflows_per_s": round(n / elapsed, 1),
        "steps_per_s": round(n * steps / elapsed, 1),
        **per_workflow(counts, n),
        **cpu,
    }
    peerkit.say("throughput", figures)
    return figures


def latency(main: Absurd) -> dict[str, Any]:
    steps, runs = ARGS.seq_steps, ARGS.seq_runs

    def one() -> tuple[str, float]:
        t0 = time.perf_counter()
        task_id = spawn(main, steps)
        main.work_batch("caller", claim_timeout=120, batch_size=1)
        return task_id, (time.perf_counter() - t0) * 1000

    check(main, [one()[0] for _ in range(5)], steps)
    STATEMENTS.take()
    cpu0 = peerkit.CpuMark()
    done = [one() for _ in range(runs)]
    cpu = peerkit.CpuMark().since(cpu0, runs)
    counts = STATEMENTS.take()
    check(main, [task_id for task_id, _ in done], steps)
    figures = {
        "steps": steps,
        "runs": runs,
        **peerkit.latency_figures([ms for _, ms in done], steps),
        **per_workflow(counts, runs),
        **cpu,
    }
    peerkit.say("latency", figures)
    return figures


# ---------------------------------------------------------------- main


def install_schema(path: Path) -> str:
    """A fresh ``absurd_bench`` with Absurd's schema and the bench queue; the file's sha256."""
    sql = path.read_bytes()
    peerkit.recreate_database(DB)
    with psycopg.connect(peerkit.pg_dsn(DB), autocommit=True) as conn:
        conn.execute(sql)  # no parameters: sent as one simple query, $$ bodies and all
    setup = Absurd(peerkit.pg_dsn(DB), queue_name=QUEUE)
    setup.create_queue()
    setup.close()
    return hashlib.sha256(sql).hexdigest()


def main() -> None:
    schema = Path(ARGS.schema)
    if not schema.is_file():
        print(f"SKIP: Absurd's schema not found at {schema}", flush=True)
        sys.exit(2)
    try:
        sdk_version = version("absurd-sdk")
    except PackageNotFoundError:
        sdk_version = None
    results: dict[str, Any] = {"db": "pg", "absurd_sdk_version": sdk_version}
    results["absurd_schema_sha256"] = install_schema(schema)
    main_client = client()
    runners = {"throughput": throughput, "latency": latency}
    try:
        for phase in ARGS.phases.split(","):
            results[phase] = runners[phase](main_client)
    finally:
        main_client.close()
        peerkit.drop_database(DB)
    peerkit.append_json(ARGS.json, {"args": vars(ARGS), **results})
    print("done", flush=True)


if __name__ == "__main__":
    main()
