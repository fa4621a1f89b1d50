"""Starts raced from several processes at once, for the tests of exact admission.

Each process opens its own store on the shared database (``open_store(url)``), waits for the
others at a barrier, then sends all its starts at once; the outcomes come back by run id.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from datetime import UTC, datetime
from typing import Any

from runlane.models import RunSpec
from runlane.stores import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)

Outcome = tuple[str, bool, str | None]  # a start's run id, whether it created it, its refusal


def _start_runs(
    url: str, worker: int, count: int, gates: dict[str, Any], barrier: Any, results: Any
) -> None:
    """In a spawned process: ``count`` starts gated by ``gates``, all at once."""

    async def main() -> list[Outcome]:
        store = open_store(url)
        await store.open()
        try:
            specs = [
                RunSpec(f"w{worker}-{n:03}", "wf", "1", None, T0, **gates) for n in range(count)
            ]
            barrier.wait(timeout=60)
            outcomes = await asyncio.gather(*(store.create_runs([s], T0) for s in specs))
            # Refusals travel as their class names: an error's own arguments do not pickle.
            return [
                (s.id, o.created, type(o.rejected).__name__ if o.rejected else None)
                for s, [o] in zip(specs, outcomes, strict=True)
            ]
        finally:
            await store.close()

    results.put(asyncio.run(main()))


def race_starts(
    url: str, gates: dict[str, Any], *, processes: int = 4, per_process: int = 50
) -> list[Outcome]:
    """The outcome of every start of ``processes`` processes racing ``per_process`` each."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=_start_runs, args=(url, worker, per_process, gates, barrier, results))
        for worker in range(processes)
    ]
    for proc in procs:
        proc.start()
    try:
        return [outcome for _ in procs for outcome in results.get(timeout=120)]
    finally:
        for proc in procs:
            proc.join(timeout=30)
