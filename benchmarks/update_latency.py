"""How long ``engine.update`` takes to return the reply, on the instance that runs the workflow
and on another one (which learns of the reply by polling the store).

    python benchmarks/update_latency.py postgresql://postgres@127.0.0.1:5432/runlane_bench \\
        --redis redis://127.0.0.1:6379/0

One run answers ``--updates`` updates one after the other (a trivial reply each); the figures
are the medians and 99th percentiles of the calls' wall-clock times. With ``--redis``, the
engines share a run queue, so the other instance's update reaches the runner at once; without
it, the runner finds the woken run at its next poll (``--poll`` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import runlane
from runlane import Engine
from runlane.stores import open_store
from runlane.transports import open_transport


@runlane.workflow(name="bench.desk")
async def desk(ctx: runlane.Context, updates: int) -> int:
    for _ in range(updates):
        update = await ctx.wait_for_update("ask")
        await ctx.reply(update, update.payload)
    return updates


async def timed_updates(caller: Engine, run_id: str, count: int) -> list[float]:
    took = []
    for n in range(count):
        began = time.perf_counter()
        assert await caller.update(run_id, "ask", n, timeout=30) == n
        took.append((time.perf_counter() - began) * 1000)
    return took


def summary(label: str, took: list[float]) -> str:
    ordered = sorted(took)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{label:<28} median {statistics.median(ordered):7.2f} ms   p99 {p99:7.2f} ms"


async def measure(url: str, redis: str | None, count: int, poll: float) -> list[str]:
    prefix = f"rl-bench-{uuid.uuid4().hex[:8]}"

    def transport() -> Any:
        return open_transport(redis, prefix=prefix) if redis else None

    runner = Engine(open_store(url), transport=transport(), workflows=[desk], poll_interval=poll)
    other = Engine(
        open_store(url), transport=transport(), workflows=[desk], drive=False, consumers="never"
    )
    lines = []
    async with runner, other:
        for label, caller in (("the runner's own instance", runner), ("another instance", other)):
            run = await runner.start(desk, count, run_id=f"desk-{uuid.uuid4().hex[:8]}")
            await timed_updates(caller, run.id, 3)  # warm up: connections, prepared statements
            lines.append(summary(label, await timed_updates(caller, run.id, count - 3)))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the store (sqlite:///file.db, postgresql://...)")
    parser.add_argument("--redis", default=None, help="a Redis URL: the engines' run queue")
    parser.add_argument("--updates", type=int, default=53, help="updates per run (3 warm up)")
    parser.add_argument("--poll", type=float, default=0.05, help="the runner's poll interval")
    args = parser.parse_args()
    for line in asyncio.run(measure(args.url, args.redis, args.updates, args.poll)):
        print(line)


if __name__ == "__main__":
    main()
