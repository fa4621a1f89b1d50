"""The door into threads: a coroutine on a loop of its own, and a call back onto another loop."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from runlane.concurrency import run_on_loop, run_on_own_loop


async def test_a_blocking_coroutine_on_its_own_loop_leaves_the_callers_loop_free() -> None:
    ticks: list[float] = []

    async def blocking() -> str:
        time.sleep(0.6)  # sync code between awaits: it holds its loop, not the caller's
        await asyncio.sleep(0)
        return threading.current_thread().name

    async def ticking() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    ticker = asyncio.create_task(ticking())
    with ThreadPoolExecutor(1, thread_name_prefix="own") as threads:
        began = time.monotonic()
        name = await run_on_own_loop(blocking, threads)
        ended = time.monotonic()
    ticker.cancel()
    during = [t for t in ticks if began <= t <= ended]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert name.startswith("own")
    assert len(during) >= 10 and max(gaps) < 0.3, f"{len(during)} ticks, gaps {gaps}"


async def test_cancelling_the_caller_cancels_the_coroutine_on_its_loop() -> None:
    began = threading.Event()
    seen: list[str] = []

    async def waiting() -> None:
        began.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    with ThreadPoolExecutor(1) as threads:
        caller = asyncio.create_task(run_on_own_loop(waiting, threads))
        while not began.is_set():
            await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(caller, 5)
    assert seen == ["cancelled"]


async def test_an_error_on_its_own_loop_reaches_the_caller() -> None:
    async def failing() -> None:
        raise ValueError("from the other loop")

    with ThreadPoolExecutor(1) as threads, pytest.raises(ValueError, match="other loop"):
        await run_on_own_loop(failing, threads)


async def test_a_call_made_from_another_loop_runs_on_the_loop_it_names() -> None:
    home = asyncio.get_running_loop()

    async def where(fail: bool) -> Any:
        if fail:
            raise KeyError("on the home loop")
        return asyncio.get_running_loop() is home

    async def from_elsewhere() -> tuple[bool, bool]:
        on_home = await run_on_loop(where(False), home)
        with pytest.raises(KeyError):
            await run_on_loop(where(True), home)
        return on_home, asyncio.get_running_loop() is home

    with ThreadPoolExecutor(1) as threads:
        on_home, caller_on_home = await run_on_own_loop(from_elsewhere, threads)
    assert on_home and not caller_on_home
    assert await run_on_loop(where(False), home)  # the same loop: awaited in place
