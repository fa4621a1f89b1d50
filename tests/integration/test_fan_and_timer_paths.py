"""A fail-fast fan-out over children, and the timer poll's batch cap, on every store."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

import runlane
from runlane import GatherError, RunStatus

from ..helpers import settle


@runlane.workflow(name="fan.waits")
async def waits(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("never")


@runlane.workflow(name="fan.fails")
async def fails(ctx: runlane.Context, _: Any) -> Any:
    raise ValueError("child gave up")


@runlane.workflow(name="fan.fail-fast")
async def fail_fast_parent(ctx: runlane.Context, _: Any) -> Any:
    try:
        await ctx.all(
            [ctx.child(waits, None), ctx.child(fails, None), ctx.child(waits, None)],
            fail_fast=True,
        )
    except GatherError as exc:
        return [(f["index"], f["id"]) for f in exc.failures]
    return "no error"


async def test_a_failing_child_under_fail_fast_raises_gather_error_and_cancels_its_siblings(
    make_engine: Any,
) -> None:
    engine = await make_engine(fail_fast_parent, waits, fails)
    await engine.start(fail_fast_parent, None, run_id="p")
    parent = await settle(engine, "p")
    assert (parent.status, parent.output) == (RunStatus.COMPLETED, [[1, "p.child.2"]])
    siblings = [await engine.get_run(f"p.child.{n}") for n in (1, 3)]
    assert [(s.status, (s.error or {}).get("message")) for s in siblings if s] == [
        (RunStatus.CANCELLED, "a sibling failed (fail_fast)")
    ] * 2
    failed = await engine.get_run("p.child.2")
    assert failed is not None and failed.status == RunStatus.FAILED


@runlane.workflow(name="timers.sleeper")
async def sleeper(ctx: runlane.Context, seconds: int) -> int:
    await ctx.sleep(seconds)
    return seconds


@pytest.fixture
def seeded_random() -> Iterator[None]:
    """The engine shuffles with the module-level random: seed it, and leave it as it was."""
    state = random.getstate()
    random.seed(20261130)
    yield
    random.setstate(state)


async def test_a_timer_pass_resumes_at_most_the_batch_most_overdue_first_in_shuffled_order(
    make_engine: Any, clock: Any, seeded_random: None
) -> None:
    batch, total = 5, 15
    engine = await make_engine(sleeper, timer_batch_size=batch)
    # Wake times in an order unrelated to ids and creation: run t<n> sleeps sleeps[n] seconds.
    sleeps = [(n * 7) % total + 1 for n in range(total)]
    for n, seconds in enumerate(sleeps):
        await engine.start(sleeper, seconds, run_id=f"t{n:02d}")
    await engine.run_pending()
    due_order = [f"t{n:02d}" for n in sorted(range(total), key=lambda n: sleeps[n])]
    clock.advance(total + 1)  # every timer is due now, the shortest sleeps the most overdue
    claimed: list[str] = []
    claim_run = engine.store.claim_run

    async def recorded(run_id: str, *args: Any, **kwargs: Any) -> Any:
        claimed.append(run_id)  # called as each turn starts, in the order the pass walks
        return await claim_run(run_id, *args, **kwargs)

    engine.store.claim_run = recorded
    walks = []
    for _ in range(total // batch):
        claimed.clear()
        assert await engine.resume_due_timers() == batch
        walks.append(list(claimed))
    expected = [due_order[i : i + batch] for i in range(0, total, batch)]
    assert [sorted(walk) for walk in walks] == [sorted(chunk) for chunk in expected]
    assert walks != expected, "every pass walked its batch in due order: nothing shuffled"
    done = [await engine.get_run(run_id) for run_id in due_order]
    assert all(r is not None and r.status == RunStatus.COMPLETED for r in done)
    assert await engine.resume_due_timers() == 0
