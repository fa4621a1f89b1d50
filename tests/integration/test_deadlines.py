"""Deadlines and cancellation of children on every store: a per-start execution timeout, a
child's deadline bounded by its parent's, a run that times out while it waits for a place
giving that place up, and a cancellation that reaches every child but a detached one.

The engines are driven by hand (``tick``) on a manual clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import RunStatus, Singleton, StepQueue

from ..helpers import Calls, settle

calls = Calls()
gates: list[asyncio.Event] = []


@pytest.fixture(autouse=True)
def fresh() -> None:
    calls.counts.clear()
    gates.clear()


@runlane.workflow(name="dl.waits", execution_timeout=30)
async def waits(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="dl.free")
async def free(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="dl.parent", execution_timeout=10)
async def parent(ctx: runlane.Context, kind: str) -> Any:
    child = waits if kind == "long" else free
    await ctx.start_child(child, None, run_id=f"{ctx.run_id}.attached")
    await ctx.start_child(free, None, run_id=f"{ctx.run_id}.detached", detached=True)
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="dl.tree")
async def tree(ctx: runlane.Context, depth: int) -> Any:
    if depth:
        await ctx.start_child(tree, depth - 1, run_id=f"{ctx.run_id}.c")
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="dl.keyed", singleton=Singleton(key=lambda i: "k"))
async def keyed(ctx: runlane.Context, _: Any) -> Any:
    calls.hit(ctx.run_id)
    return await ctx.wait_for_signal("go")


@runlane.step(name="dl.held", queue="one")
async def held(name: str) -> str:
    calls.hit(name)
    if name == "first":
        await gates[0].wait()
    return name


@runlane.workflow(name="dl.queued")
async def queued(ctx: runlane.Context, name: str) -> Any:
    return await ctx.step(held, name)


async def run_of(engine: Any, run_id: str) -> runlane.Run:
    run = await engine.get_run(run_id)
    assert run is not None, run_id
    return run  # type: ignore[no-any-return]


async def test_a_start_sets_its_own_execution_timeout(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(waits)
    short = await engine.start(waits, None, run_id="short", execution_timeout=5)
    long = await engine.start(waits, None, run_id="long", execution_timeout=timedelta(minutes=2))
    default = await engine.start(waits, None, run_id="default")
    assert short.deadline_at == clock.now() + timedelta(seconds=5)
    assert long.deadline_at == clock.now() + timedelta(seconds=120)
    assert default.deadline_at == clock.now() + timedelta(seconds=30)
    await engine.tick()
    clock.advance(6)
    await engine.tick()
    timed_out = await run_of(engine, "short")
    assert timed_out.status == RunStatus.CANCELLED
    assert timed_out.error is not None and timed_out.error["type"] == "ExecutionTimeoutError"
    clock.advance(30)
    await engine.tick()
    assert (await run_of(engine, "default")).status == RunStatus.CANCELLED
    assert (await run_of(engine, "long")).status == RunStatus.SUSPENDED
    for bad in (0, -1, float("inf"), "5", True):
        with pytest.raises(ValueError, match="execution_timeout"):
            await engine.start(waits, None, run_id="bad", execution_timeout=bad)
    assert await engine.get_run("bad") is None


async def test_a_childs_deadline_is_never_later_than_its_parents(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(parent, waits, free)
    started = clock.now()
    await engine.start(parent, "long", run_id="p1")  # its child's own timeout is 30 s
    await engine.start(parent, "none", run_id="p2")  # its child has none
    await engine.tick()
    deadline = started + timedelta(seconds=10)
    assert (await run_of(engine, "p1")).deadline_at == deadline
    assert (await run_of(engine, "p1.attached")).deadline_at == deadline
    assert (await run_of(engine, "p2.attached")).deadline_at == deadline
    assert (await run_of(engine, "p1.detached")).deadline_at is None  # its own: none
    clock.advance(11)
    await engine.tick()
    for run_id in ("p1", "p1.attached", "p2", "p2.attached"):
        assert (await run_of(engine, run_id)).status == RunStatus.CANCELLED, run_id
    assert (await run_of(engine, "p1.detached")).status == RunStatus.SUSPENDED
    await engine.signal("p1.detached", "go", "still here")
    assert (await settle(engine, "p1.detached")).output == "still here"


async def test_a_cancel_reaches_every_child_recursively_but_a_detached_one(
    make_engine: Any,
) -> None:
    engine = await make_engine(parent, tree, free, waits)
    await engine.start(tree, 2, run_id="t")
    for _ in range(3):
        await engine.tick()
    assert (await run_of(engine, "t.c.c")).status == RunStatus.SUSPENDED
    assert await engine.cancel("t") is True
    for run_id in ("t", "t.c", "t.c.c"):
        assert (await run_of(engine, run_id)).status == RunStatus.CANCELLED, run_id
    await engine.start(parent, "none", run_id="p")
    await engine.tick()
    await engine.cancel("p")
    assert (await run_of(engine, "p.attached")).status == RunStatus.CANCELLED
    detached = await run_of(engine, "p.detached")
    assert detached.status == RunStatus.SUSPENDED and detached.detached


async def test_a_run_timing_out_while_it_waits_for_a_slot_gives_its_place_up(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(keyed)
    await engine.start(keyed, None, run_id="holder")
    await engine.tick()
    await engine.start(keyed, None, run_id="impatient", execution_timeout=5)
    await engine.start(keyed, None, run_id="patient")
    await engine.tick()
    assert (await run_of(engine, "impatient")).status == RunStatus.BLOCKED
    clock.advance(6)
    await engine.tick()
    gone = await run_of(engine, "impatient")
    assert gone.status == RunStatus.CANCELLED
    assert gone.error is not None and gone.error["type"] == "ExecutionTimeoutError"
    await engine.signal("holder", "go")
    await settle(engine, "holder")
    await engine.tick()
    assert (await run_of(engine, "patient")).status == RunStatus.SUSPENDED  # it holds the slot
    assert calls["impatient"] == 0 and calls["patient"] == 1  # the impatient one never ran


async def test_a_run_timing_out_while_it_waits_for_a_step_queue_gives_its_place_up(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(queued, queues=[StepQueue("one", concurrency=1)])
    gates.append(asyncio.Event())
    await engine.start(queued, "first", run_id="first")
    turn = asyncio.create_task(engine.run_pending())  # its step holds the queue's one slot
    for _ in range(500):
        if calls["first"]:
            break
        await asyncio.sleep(0.01)
    await engine.start(queued, "impatient", run_id="impatient", execution_timeout=5)
    await engine.start(queued, "patient", run_id="patient")
    await engine.run_pending()
    assert (await run_of(engine, "impatient")).status == RunStatus.BLOCKED
    assert (await run_of(engine, "patient")).status == RunStatus.BLOCKED
    clock.advance(6)
    await engine.sweep_timeouts()
    assert (await run_of(engine, "impatient")).status == RunStatus.CANCELLED
    views = await engine.read(lambda store: store.queue_views())
    assert [e.run_id for view in views for e in view.entries] == ["first", "patient"]
    gates[0].set()
    await turn
    assert (await settle(engine, "first")).output == "first"
    assert (await settle(engine, "patient")).output == "patient"
    assert calls["impatient"] == 0
