"""The lost wake: an engine and a worker in one process, remote steps over Redis.

A remote result recorded by this instance makes its run due and resumes it here, while the
timer poll may hand the same due run off through the run queue (pushing its wake time a lease
ahead). When the hand-off message arrived while the result's turn was still claiming, the
follow-up turn claimed as a plain wake, found the run not due, and the run sat until the
hand-off's hold expired (a lease, 30 s). Many runs in a loop make the race likely.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import runlane
from runlane import Engine, RunStatus
from runlane.models import RetryTimer
from runlane.remote.worker import Worker
from runlane.stores import open_store
from runlane.stores.base import Store
from runlane.transports import RedisTransport

REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")


@runlane.step(name="lw.remote", group="lw")
async def remote(n: int) -> int:
    return n + 1


@runlane.workflow(name="lw.two")
async def two(ctx: runlane.Context, n: int) -> int:
    return int(await ctx.step(remote, await ctx.step(remote, n)))


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_no_run_waits_a_lease_for_a_wake_that_was_handed_off_mid_turn(pg_url: str) -> None:
    setup: Any = open_store(pg_url)
    await setup.open()
    await setup.reset_for_tests()
    await setup.close()
    prefix = f"rllost-{uuid.uuid4().hex[:8]}"
    transport = RedisTransport(REDIS_URL, prefix=prefix)
    # A fast timer poll hands due runs off often, racing the results' own resumptions.
    engine = Engine(open_store(pg_url), transport=transport, workflows=[two], poll_interval=0.01)
    worker = Worker("lw", RedisTransport(REDIS_URL, prefix=prefix), steps=[remote])
    working = asyncio.create_task(worker.run())
    try:
        async with engine:
            for rounds in range(3):
                runs = [await engine.start(two, n, run_id=f"lw-{rounds}-{n}") for n in range(150)]
                began = time.monotonic()
                slow = []
                for run in runs:
                    done = await engine.wait_for_run(run.id, timeout=60)
                    assert done.status == RunStatus.COMPLETED, (run.id, done.error)
                    if time.monotonic() - began > 15:
                        slow.append(run.id)
                # Every run of a round finishes in a few seconds unless a wake was lost.
                assert not slow, f"runs that waited for a lost wake: {slow[:5]}"
    finally:
        await worker.stop()
        await working
        await worker.transport.close()
        await transport.purge()
        await transport.close()


# ---------------------------------------------------------------- a wake refused by a lease


@runlane.workflow(name="lw.waits")
async def waits(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


async def test_a_wake_refused_by_a_dead_holders_lease_is_tried_again_when_the_lease_ends(
    make_store: Callable[[], Store], store_kind: str
) -> None:
    # The instance's own polls come every 30 s: only the refused wake, kept in memory and tried
    # again when the dead holder's 1 s lease ends, runs the run within seconds.
    first = make_store()
    second = first if store_kind == "memory" else make_store()
    producer = Engine(first, workflows=[waits], drive=False, consumers="never")
    engine = Engine(second, workflows=[waits], poll_interval=30)
    polled = _first_pass(engine)
    async with producer, engine:
        await polled.wait()  # the pass the engine makes as it starts: the next is 30 s away
        await _emptied(engine.store, store_kind)
        await producer.start(waits, None, run_id="w")
        await producer.tick()  # the run waits for its signal
        await producer.signal("w", "go", "late")  # due now, in the store only
        now = datetime.now(UTC)
        held = await engine.store.claim_run(
            "w", "dead:1", now, now + timedelta(seconds=1), singleton_retry=RetryTimer(1, 30, 1)
        )
        assert held.claim is not None  # an instance claimed it and died before its turn
        await engine.signal("w", "go", "again")  # a wake for the run, refused: the lease is held
        for _ in range(100):
            if len(engine._execution.leased_wakes):
                break
            await asyncio.sleep(0.01)
        assert len(engine._execution.leased_wakes) == 1, "the wake was not refused and kept"
        began = time.monotonic()
        done = await engine.wait_for_run("w", timeout=10)
        took = time.monotonic() - began
    assert (done.status, done.output, done.recoveries) == (RunStatus.COMPLETED, "late", 1)
    assert took < 1.0 + 1.5, took


def _first_pass(engine: Engine) -> asyncio.Event:
    """Set once the engine's loop has made its first pass: one still to come when the signal is
    stored would find the run due and claim it before the dead holder does."""
    passed = asyncio.Event()
    loop = engine._execution.loop
    one_pass = loop._pass

    async def noted() -> int:
        try:
            return await one_pass()
        finally:
            passed.set()

    loop._pass = noted
    return passed


async def _emptied(store: Store, kind: str) -> None:
    reset = getattr(store, "reset_for_tests", None)
    if kind == "postgres" and reset is not None:
        await reset()
