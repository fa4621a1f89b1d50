"""procrastinate's side of the job-queue workloads (run in ``.queues-venv``; read against 3.10).

    .queues-venv/bin/python benchmarks/peers/procrastinate_driver.py --db NAME --setup
    .queues-venv/bin/python benchmarks/peers/procrastinate_driver.py --db NAME --phase perkey

The protocol is ``benchmarks/peers/node/driver.mjs``'s: ``--setup`` applies the schema and
exits; otherwise the worker starts, ``READY`` is printed, a line on stdin starts the phase,
``RESULT {json}`` reports it, and another line stops the worker. Keyed jobs are deferred with
``lock=<key>`` (one job of a lock runs at a time, in the order they were deferred); a plain job
has none. ``queueing_lock`` is not used: it refuses a second *waiting* job of the same lock,
which a queue of 20 per key needs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerkit
import procrastinate


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True)
    p.add_argument("--setup", action="store_true")
    p.add_argument("--phase", default="throughput")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--per-key", type=int, default=20)
    p.add_argument("--step-ms", type=float, default=2.0)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=10)
    return p.parse_args()


ARGS = parse_args()
APP = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=peerkit.pg_dsn(ARGS.db), max_size=14)
)
# Per key, [enter, leave, seq] in the order the bodies entered.
SEEN: dict[str, list[list[float]]] = {}
FINISHED = [0]


@APP.task(name="job")
async def job(seq: int, key: str | None = None) -> None:
    if key is not None:
        entry = [time.perf_counter(), 0.0, float(seq)]
        SEEN.setdefault(key, []).append(entry)
        await asyncio.sleep(ARGS.step_ms / 1000)
        entry[1] = time.perf_counter()
    FINISHED[0] += 1


async def enqueue(data: dict[str, Any]) -> int:
    if "key" in data:
        return await job.configure(lock=data["key"]).defer_async(**data)
    return await job.defer_async(**data)


async def query(sql: str, *params: Any) -> Any:
    async with APP.connector.pool.connection() as conn:  # type: ignore[attr-defined]
        return await (await conn.execute(sql, params)).fetchone()


async def pending() -> int:
    row = await query("SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'")
    return int(row[0])


async def done(job_id: int) -> bool:
    row = await query("SELECT status FROM procrastinate_jobs WHERE id = %s", job_id)
    return bool(row) and row[0] == "succeeded"


async def until(check: Any, every: float) -> None:
    while not await check():
        await asyncio.sleep(every)


async def batch(inputs: list[dict[str, Any]]) -> dict[str, Any]:
    t0 = time.perf_counter()
    for data in inputs:
        await enqueue(data)
    enqueued = time.perf_counter()

    async def all_done() -> bool:
        return FINISHED[0] >= len(inputs) and await pending() == 0

    await until(all_done, 0.005)
    t1 = time.perf_counter()
    return {
        "jobs": len(inputs),
        "seconds": t1 - t0,
        "enqueue_seconds": enqueued - t0,
        "tail_seconds": t1 - enqueued,
    }


def keyed(keys: int, per_key: int) -> list[dict[str, Any]]:
    return [{"key": f"key-{k:03d}", "seq": j} for j in range(per_key) for k in range(keys)]


def checks() -> dict[str, int]:
    overlaps = fifo = 0
    for entries in SEEN.values():
        for before, after in itertools.pairwise(entries):
            overlaps += after[0] < before[1]
            fifo += after[2] < before[2]
    return {"overlapping_pairs": overlaps, "fifo_violations_within_key": fifo}


async def latency() -> dict[str, Any]:
    samples = []
    for i in range(ARGS.runs + 5):
        t0 = time.perf_counter()
        job_id = await enqueue({"seq": i})
        await until(lambda job_id=job_id: done(job_id), 0.001)
        if i >= 5:
            samples.append((time.perf_counter() - t0) * 1000)
    return {"jobs": ARGS.runs, **peerkit.latency_figures(samples, 1)}


async def phase(name: str) -> dict[str, Any]:
    if name == "throughput":
        return await batch([{"seq": i} for i in range(ARGS.n)])
    if name == "perkey":
        return {**await batch(keyed(ARGS.keys, ARGS.per_key)), **checks()}
    if name == "hotkey":
        return {**await batch(keyed(1, ARGS.per_key)), **checks()}
    return await latency()


async def main() -> None:
    async with APP.open_async():
        if ARGS.setup:
            await APP.schema_manager.apply_schema_async()
            return
        worker = asyncio.create_task(
            APP.run_worker_async(concurrency=ARGS.concurrency, install_signal_handlers=False)
        )
        print("READY", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        cpu0 = os.times()
        figures = await phase(ARGS.phase)
        cpu = os.times()
        spent = (cpu.user + cpu.system - cpu0.user - cpu0.system) * 1000
        figures["client_cpu_ms_per_job"] = spent / figures["jobs"]
        print("RESULT " + json.dumps(figures), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await worker


if __name__ == "__main__":
    asyncio.run(main())
