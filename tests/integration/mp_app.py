"""Worker processes for the multi-process tests (one engine per process, one shared backend).

python mp_app.py hammer URL TOTAL             -> drives the hot-key runs (created beforehand by
                                                 the test) until TOTAL of them completed
python mp_app.py quota URL N_STARTS PROC     -> fires N_STARTS starts at a full-able quota and
                                                 prints "admitted=<n> refused=<m>"
python mp_app.py rate URL N_STARTS PROC      -> the same against RateLimit(limit=10, period=3600)
python mp_app.py queue URL TOTAL             -> drives the queued runs (created beforehand by the
                                                 test) until TOTAL of them completed
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import runlane
from runlane import (
    Concurrency,
    ConcurrencyLimitError,
    Engine,
    RateLimit,
    RateLimitError,
    Singleton,
    StepQueue,
)
from runlane.stores import open_store

LOG = os.environ.get("RUNLANE_MP_LOG", "")


@runlane.step(name="mark")
def mark(event: str) -> float:
    stamp = time.time()
    with open(LOG, "a") as log:
        log.write(f"{event} {stamp:.6f}\n")
    return stamp


@runlane.step(name="hold")
async def hold(_: Any) -> None:
    await asyncio.sleep(0.003)


@runlane.workflow(name="hot", singleton=Singleton(key=lambda i: "hot-key", limit=1))
async def hot(ctx: runlane.Context, i: Any) -> None:
    await ctx.step(mark, f"enter {ctx.run_id}")
    await ctx.step(hold, None)
    await ctx.step(mark, f"exit {ctx.run_id}")


@runlane.workflow(name="quota", concurrency=Concurrency(key=lambda i: "tenant:race", limit=8))
async def quota(ctx: runlane.Context, i: Any) -> None:
    await ctx.wait_for_signal("never")


@runlane.workflow(name="rate", rate_limit=RateLimit(limit=10, period=3600))
async def rate(ctx: runlane.Context, i: Any) -> None:
    await ctx.wait_for_signal("never")


@runlane.step(name="slot", queue="three")
async def slot(name: str) -> None:
    with open(LOG, "a") as log:
        log.write(f"enter {name} {time.time():.6f}\n")
    await asyncio.sleep(0.005)
    with open(LOG, "a") as log:
        log.write(f"exit {name} {time.time():.6f}\n")


@runlane.workflow(name="queued")
async def queued(ctx: runlane.Context, i: Any) -> None:
    for n in range(3):
        await ctx.step(slot, f"{ctx.run_id}:{n}")


async def hammer(url: str, total: int, queue: bool = False) -> None:
    engine = Engine(
        open_store(url),
        workflows=[queued if queue else hot],
        queues=[StepQueue("three", concurrency=3)],
        poll_interval=0.05,
        singleton_retry=0.2,
    )
    async with engine:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = await engine.list_runs(status="completed", limit=total + 1)
            if len(done) >= total:
                break
            await asyncio.sleep(0.1)


async def race(url: str, starts: int, proc: str, limited: bool) -> None:
    workflow, refusal = (rate, RateLimitError) if limited else (quota, ConcurrencyLimitError)
    engine = Engine(open_store(url), workflows=[workflow], drive=False)
    admitted = refused = 0
    async with engine:
        results = await asyncio.gather(
            *(engine.start(workflow, None, run_id=f"q{proc}-{n}") for n in range(starts)),
            return_exceptions=True,
        )
    for result in results:
        if isinstance(result, refusal):
            refused += 1
        elif isinstance(result, BaseException):
            raise result
        else:
            admitted += 1
    print(f"admitted={admitted} refused={refused}", flush=True)


if __name__ == "__main__":
    mode, url = sys.argv[1], sys.argv[2]
    if mode in ("hammer", "queue"):
        asyncio.run(hammer(url, int(sys.argv[3]), queue=mode == "queue"))
    else:
        asyncio.run(race(url, int(sys.argv[3]), sys.argv[4], limited=mode == "rate"))
