"""Retention on every store: driving engines delete settled runs past their period, and old
events of the event log, in batches, beside the turns; a parent stays until its children
settle."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import DefinitionError, Engine, Retention, RunStatus
from runlane.stores import MemoryStore

DAY = timedelta(days=1)


@runlane.workflow(name="quick")
async def quick(ctx: runlane.Context, input: Any) -> Any:
    if input == "boom":
        raise runlane.FatalError("boom")
    return input


@runlane.workflow(name="waits")
async def waits(ctx: runlane.Context, input: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="detaches")
async def detaches(ctx: runlane.Context, input: Any) -> Any:
    await ctx.start_child(waits, None, run_id="kid")
    return "started"


async def ids(engine: Engine) -> set[str]:
    return {run.id for run in await engine.list_runs(limit=1000)}


async def test_a_tick_deletes_each_status_after_its_own_period(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(quick, retention=Retention(completed=DAY, failed=3 * DAY))
    await engine.start("quick", 1, "done")
    await engine.start("quick", "boom", "failed")
    await engine.tick()
    assert {r.status for r in await engine.list_runs()} == {RunStatus.COMPLETED, RunStatus.FAILED}
    clock.advance(DAY + timedelta(seconds=1))
    await engine.tick()
    assert await ids(engine) == {"failed"}
    clock.advance(2 * DAY)
    await engine.tick()
    assert await ids(engine) == set()


async def test_a_pass_that_found_nothing_waits_its_interval(make_engine: Any, clock: Any) -> None:
    retention = Retention(completed=60, interval=600)
    engine = await make_engine(quick, retention=retention)
    await engine.tick()  # the first pass: nothing due yet
    await engine.start("quick", 1, "a")
    await engine.tick()
    clock.advance(120)
    await engine.tick()
    assert await ids(engine) == {"a"}, "a pass came before the interval was over"
    clock.advance(600)
    await engine.tick()
    assert await ids(engine) == set()


async def test_a_backlog_goes_in_batches_with_a_short_pause_between(
    make_engine: Any, clock: Any
) -> None:
    retention = Retention(completed=1, batch=2, interval=100)
    engine = await make_engine(quick, retention=retention)
    for n in range(5):
        await engine.start("quick", n, f"r{n}")
    await engine.tick()  # runs them; its pass found nothing due yet
    clock.advance(100)
    assert await engine.prune_retained() == 2
    assert await engine.prune_retained() == 0  # the pause between batches
    clock.advance(0.25)
    assert await engine.prune_retained() == 2
    clock.advance(0.25)
    assert await engine.prune_retained() == 1
    assert await ids(engine) == set()
    clock.advance(50)
    assert await engine.prune_retained() == 0  # caught up: the next pass is an interval away


async def test_a_parent_outlives_its_active_child(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(detaches, waits, retention=Retention(completed=60, interval=1))
    await engine.start("detaches", None, "parent")
    await engine.tick()
    await engine.tick()
    assert (await engine.get_run("parent")).status == RunStatus.COMPLETED
    clock.advance(120)
    await engine.tick()
    assert await ids(engine) == {"parent", "kid"}
    await engine.signal("kid", "go", 1)
    await engine.tick()
    clock.advance(120)
    await engine.tick()
    assert await ids(engine) == set()


async def test_engine_prune_deletes_every_settled_status_older_than_asked(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(quick, waits)
    await engine.start("quick", 1, "done")
    await engine.start("quick", "boom", "failed")
    await engine.start("waits", None, "waiting")
    await engine.tick()
    await engine.start("quick", 2, "recent")
    clock.advance(3600)
    await engine.tick()
    assert await engine.prune(timedelta(minutes=30), batch=1) == 2
    assert await ids(engine) == {"waiting", "recent"}


async def event_names(engine: Engine) -> list[Any]:
    return [e.payload for e in await engine.store.events_after("tick", 0, 100)]


async def test_events_are_kept_as_long_as_the_longest_run_period_by_default(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(quick, retention=Retention(completed=60, failed=600, interval=1))
    for n in range(3):
        await engine.publish_event("tick", n)
    await engine.tick()
    clock.advance(300)
    await engine.publish_event("tick", 3)
    await engine.tick()
    assert await event_names(engine) == [0, 1, 2, 3], "events went before the longest period"
    clock.advance(301)
    await engine.tick()
    assert await event_names(engine) == [3]


async def test_an_events_period_of_its_own_prunes_the_log_in_batches(
    make_engine: Any, clock: Any
) -> None:
    retention = Retention(events=10, batch=2, interval=100)
    engine = await make_engine(quick, retention=retention)
    await engine.tick()  # the first pass, before any event
    for n in range(6):
        await engine.publish_event("tick", n)
    clock.advance(100)
    await engine.prune_retained()
    assert await event_names(engine) == [2, 3, 4, 5]
    clock.advance(0.25)  # a full batch: the next one comes after the short pause
    await engine.prune_retained()
    clock.advance(0.25)
    await engine.prune_retained()
    assert await event_names(engine) == [5], "the newest event is kept"
    assert engine.pruner is not None and engine.pruner.events_deleted == 5


async def test_engine_prune_deletes_old_events_too(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(quick)
    await engine.publish_event("tick", "old")
    await engine.publish_event("tick", "older than asked as well")
    clock.advance(3600)
    await engine.publish_event("tick", "new")
    assert await engine.prune(timedelta(minutes=30), batch=1) == 0
    assert await event_names(engine) == ["new"]
    await engine.publish_event("tick", "newer")
    assert await engine.prune(0, events=False) == 0
    assert await event_names(engine) == ["new", "newer"]
    clock.advance(1)
    assert await engine.prune_events(0) == 1


async def test_a_driving_engine_prunes_beside_its_turns() -> None:
    engine = Engine(
        MemoryStore(), workflows=[quick], poll_interval=0.02, retention=Retention(completed=0)
    )
    async with engine:
        run = await engine.start("quick", 1, "a")
        await engine.wait_for_run(run.id, timeout=5)
        deadline = time.monotonic() + 5
        while await engine.get_run("a") is not None:
            assert time.monotonic() < deadline, "the settled run was never pruned"
            await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    "bad",
    [{"completed": -1}, {"failed": "7d"}, {"batch": 0}, {"interval": 0}, {"events": -5}],
)
def test_retention_refuses_nonsense_at_construction(bad: dict[str, Any]) -> None:
    with pytest.raises(DefinitionError):
        Retention(**bad)
