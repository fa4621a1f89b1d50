"""Remote workflow workloads: the 10-step latency and the 1,000-run throughput with the workflow
remote, its turns decided by one Python worker process over Redis.

The workflow is ``bench.steps`` of ``workloads.py`` declared with a group: its steps are local
steps of the workflow, so they run on the worker inside the turn, and a run of ``n`` steps is
one turn (one workflow task, one decision) on the engine's side.

    .venv/bin/python benchmarks/remote.py --worker PREFIX     # the worker process
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import common

import runlane
from runlane import Engine, RemoteWorkflow, Worker
from runlane.transports import RedisTransport

REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")
GROUP = "bench-wf"
Figures = dict[str, Any]


@runlane.step(name="bench.noop")
async def noop(x: int) -> int:
    return x + 1


@runlane.workflow(name="bench.remote-steps", group=GROUP)
async def remote_steps(ctx: runlane.Context, n: int) -> int:
    x = 0
    for _ in range(n):
        x = await ctx.step(noop, x)
    return x


@asynccontextmanager
async def remote_engine(target: Any) -> AsyncIterator[Engine]:
    """An engine without the workflow's code, and one worker process deciding its turns."""
    prefix = f"rl-bench-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "--worker", prefix],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
    )
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    engine = Engine(
        target.store(),
        transport=transport,
        remote_workflows=[RemoteWorkflow("bench.remote-steps", group=GROUP)],
    )
    try:
        async with engine:
            yield engine
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        await transport.purge()
        await transport.close()


async def run_ms(engine: Engine, steps: int) -> float:
    t0 = time.perf_counter()
    run = await engine.start("bench.remote-steps", steps)
    done = await engine.wait_for_run(run.id, timeout=60)
    assert done.output == steps, done
    return (time.perf_counter() - t0) * 1000


async def remote_latency(target: Any, runs: int = 50, steps: int = 10) -> Figures:
    target.renew()
    async with remote_engine(target) as engine:
        for _ in range(5):
            await run_ms(engine, steps)
        samples = [await run_ms(engine, steps) for _ in range(runs)]
    return {
        "steps": steps,
        "runs": runs,
        "worker_processes": 1,
        "transport": "redis",
        "median_ms": round(common.median(samples), 2),
        "p99_ms": round(common.pct(samples, 0.99), 2),
        "min_ms": round(min(samples), 2),
        "max_ms": round(max(samples), 2),
    }


async def remote_throughput(target: Any, n: int = 1000, steps: int = 2) -> Figures:
    target.renew()
    async with remote_engine(target) as engine:
        for _ in range(20):
            await run_ms(engine, steps)
        t0 = time.perf_counter()
        ids = [(await engine.start("bench.remote-steps", steps)).id for _ in range(n)]
        started = time.perf_counter()
        for run_id in ids:
            done = await engine.wait_for_run(run_id, timeout=600)
            assert done.output == steps, done
        elapsed = time.perf_counter() - t0
    return {
        "n": n,
        "steps": steps,
        "worker_processes": 1,
        "transport": "redis",
        "seconds": round(elapsed, 3),
        "start_loop_seconds": round(started - t0, 3),
        "workflows_per_s": round(n / elapsed, 1),
        "steps_per_s": round(n * steps / elapsed, 1),
    }


async def work(prefix: str) -> None:
    worker = Worker(
        GROUP,
        RedisTransport(REDIS_URL, prefix=prefix),
        workflows=[remote_steps],
        steps=[noop],
        concurrency=64,
        poll_timeout=0.5,
    )
    await worker.run()


def main(argv: Sequence[str]) -> None:
    if len(argv) == 2 and argv[0] == "--worker":
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        asyncio.run(work(argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
