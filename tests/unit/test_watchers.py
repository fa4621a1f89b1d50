"""A run that completed on this engine a moment before its caller came to wait is returned
without a read; anything else is read from the store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

import runlane
from runlane import Engine, RunStatus
from runlane import watchers as kept
from runlane.models import Run
from runlane.stores import MemoryStore
from runlane.testing import ManualClock
from runlane.watchers import RunWatchers


@runlane.workflow(name="settlements.done")
async def done(ctx: runlane.Context, x: int) -> int:
    return x + 1


@runlane.workflow(name="settlements.fails")
async def fails(ctx: runlane.Context, x: int) -> int:
    raise runlane.FatalError("no")


def counted_reads(engine: Engine) -> list[str]:
    reads: list[str] = []
    get_run = engine.store.get_run

    async def counting(run_id: str) -> Any:
        reads.append(run_id)
        return await get_run(run_id)

    engine.store.get_run = counting  # type: ignore[method-assign]
    return reads


async def test_a_run_completed_here_before_the_wait_is_returned_without_a_read() -> None:
    engine = Engine(MemoryStore(), workflows=[done, fails], drive=False, clock=ManualClock())
    ok = await engine.start(done, 1)
    bad = await engine.start(fails, 1)
    await engine.run_pending()
    reads = counted_reads(engine)
    completed = await engine.wait_for_run(ok.id, timeout=1)
    assert (completed.status, completed.output) == (RunStatus.COMPLETED, 2)
    assert reads == []
    assert completed == await engine.get_run(ok.id)  # what the store holds
    failed = await engine.wait_for_run(bad.id, timeout=1)
    assert failed.status == RunStatus.FAILED
    assert bad.id in reads  # a failed run may be requeued: always read


def _run(run_id: str, status: RunStatus = RunStatus.COMPLETED) -> Run:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Run(run_id, "wf", "1", status, None, None, None, (), at, at, None, None, None, 0)


def test_completed_runs_are_kept_for_a_while_and_a_bounded_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("runlane.watchers.time.monotonic", lambda: now[0])
    monkeypatch.setattr(kept, "KEPT_MOST", 3)
    settled = RunWatchers()
    for name in "abcd":
        settled.notify([name], _run(name))
    settled.notify(["x"], _run("x", RunStatus.CANCELLED))
    assert [settled.completed(r) is not None for r in "abcdx"] == [False, True, True, True, False]
    now[0] += kept.KEPT_SECONDS + 0.1
    assert settled.completed("d") is None
