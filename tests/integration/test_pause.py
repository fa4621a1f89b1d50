"""Pause and resume on every store: a paused run finishes the step in flight, then takes no
further turn; what comes meanwhile (timers, signals) takes effect on resume; it keeps its places.

The engines are driven by hand (``tick``) on a manual clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import RunNotFoundError, RunStatus, Singleton, StepQueue

from ..helpers import Calls, settle

calls = Calls()
gates: list[asyncio.Event] = []  # the test's own (an event is bound to its loop)


@pytest.fixture(autouse=True)
def fresh() -> None:
    calls.counts.clear()
    gates.clear()


@runlane.step(name="pause.held")
async def held(n: int) -> int:
    calls.hit("held")
    await gates[0].wait()
    return n


@runlane.step(name="pause.count")
async def count(n: int) -> int:
    calls.hit(f"count{n}")
    return n


@runlane.workflow(name="pause.steps")
async def steps(ctx: runlane.Context, n: int) -> int:
    first = await ctx.step(held, n)
    second = await ctx.step(count, 2)
    return int(first) + int(second)


@runlane.workflow(name="pause.waits")
async def waits(ctx: runlane.Context, _: None) -> Any:
    await ctx.step(count, 1)
    await ctx.sleep(60)
    calls.hit("woke")
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="pause.sleeper")
async def sleeper(ctx: runlane.Context, _: None) -> str:
    await ctx.sleep(60)
    calls.hit("after-sleep")
    return "rested"


@runlane.workflow(name="pause.keyed", singleton=Singleton(key=lambda i: "k"))
async def keyed(ctx: runlane.Context, _: None) -> str:
    await ctx.wait_for_signal("go")
    return "done"


async def status(engine: Any, run_id: str) -> RunStatus:
    run = await engine.get_run(run_id)
    assert run is not None
    return run.status  # type: ignore[no-any-return]


async def test_a_pause_lets_the_step_in_flight_finish_and_record_then_stops(
    make_engine: Any,
) -> None:
    engine = await make_engine(steps)
    gates.append(asyncio.Event())
    await engine.start(steps, 40, run_id="r")
    turn = asyncio.create_task(engine.tick())
    for _ in range(200):
        if calls["held"]:
            break
        await asyncio.sleep(0.01)
    assert await engine.pause("r") is True
    assert await status(engine, "r") == RunStatus.RUNNING  # asked: the turn holds it
    gates[0].set()
    await turn
    assert await status(engine, "r") == RunStatus.PAUSED
    [record] = await engine.list_steps("r")
    assert (record.name, record.status, record.output) == ("pause.held", "completed", 40)
    await engine.tick()
    assert calls["count2"] == 0 and await status(engine, "r") == RunStatus.PAUSED
    assert await engine.resume("r") is True
    run = await settle(engine, "r")
    assert (run.status, run.output) == (RunStatus.COMPLETED, 42)
    assert calls["held"] == 1 and calls["count2"] == 1  # the recorded step was not run again


async def test_timers_and_signals_that_come_while_paused_take_effect_on_resume(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(waits)
    await engine.start(waits, None, run_id="r")
    await engine.tick()
    assert await status(engine, "r") == RunStatus.SUSPENDED  # asleep
    assert await engine.pause("r") is True
    assert await status(engine, "r") == RunStatus.PAUSED
    clock.advance(120)
    await engine.signal("r", "go", "payload")
    for _ in range(3):
        await engine.tick()
    assert calls["woke"] == 0 and await status(engine, "r") == RunStatus.PAUSED
    assert await engine.resume("r") is True
    run = await settle(engine, "r")
    assert (run.status, run.output) == (RunStatus.COMPLETED, "payload")
    assert calls["count1"] == 1 and calls["woke"] == 1


async def test_a_resume_before_the_timer_sleeps_out_the_rest_of_it(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sleeper)
    started = clock.now()
    await engine.start(sleeper, None, run_id="r")
    await engine.tick()
    clock.advance(10)
    await engine.pause("r")
    clock.advance(10)
    assert await engine.resume("r") is True
    await engine.tick()  # the resumed turn finds the sleep unfinished
    run = await engine.get_run("r")
    assert run.status == RunStatus.SUSPENDED and calls["after-sleep"] == 0
    assert run.wake_at == started + timedelta(seconds=60)
    clock.advance(41)
    run = await settle(engine, "r")
    assert run.output == "rested" and calls["after-sleep"] == 1


async def test_a_resume_racing_the_timer_runs_the_turn_once(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(sleeper)
    await engine.start(sleeper, None, run_id="r")
    await engine.tick()
    await engine.pause("r")
    clock.advance(60)  # the timer comes due while paused
    resumed = await asyncio.gather(engine.resume("r"), engine.tick(), engine.tick())
    assert resumed[0] is True
    run = await settle(engine, "r")
    assert run.output == "rested" and calls["after-sleep"] == 1


async def test_a_paused_holder_keeps_its_slot_and_a_cancel_frees_it(make_engine: Any) -> None:
    engine = await make_engine(keyed)
    await engine.start(keyed, None, run_id="first")
    await engine.tick()
    await engine.start(keyed, None, run_id="second")
    await engine.tick()
    assert await status(engine, "second") == RunStatus.BLOCKED
    assert await engine.pause("first") is True
    for _ in range(2):
        await engine.tick()
    assert await status(engine, "second") == RunStatus.BLOCKED
    assert await engine.cancel("first") is True
    assert await status(engine, "first") == RunStatus.CANCELLED
    await engine.tick()
    await engine.signal("second", "go")
    assert (await settle(engine, "second")).output == "done"


async def test_a_paused_waiter_keeps_its_place_in_line_once_resumed(make_engine: Any) -> None:
    engine = await make_engine(keyed)
    for run_id in ("first", "second", "third"):
        await engine.start(keyed, None, run_id=run_id)
        await engine.tick()
    assert await engine.pause("second") is True
    await engine.signal("first", "go")
    await settle(engine, "first")
    await engine.tick()
    assert await status(engine, "third") == RunStatus.SUSPENDED  # admitted: "second" is paused
    assert await engine.resume("second") is True
    await engine.tick()
    assert await status(engine, "second") == RunStatus.BLOCKED  # behind "third" now
    await engine.signal("third", "go")
    await settle(engine, "third")
    await engine.tick()
    await engine.signal("second", "go")
    assert (await settle(engine, "second")).output == "done"


async def test_pause_and_resume_say_false_when_they_do_not_apply(make_engine: Any) -> None:
    engine = await make_engine(sleeper)
    await engine.start(sleeper, None, run_id="r")
    assert await engine.resume("r") is False  # not paused
    assert await engine.pause("r") is True  # pending: paused at once
    assert await engine.pause("r") is False
    assert await engine.cancel("r") is True
    assert await engine.pause("r") is False  # finished
    assert await engine.resume("r") is False
    for control in (engine.pause, engine.resume):
        with pytest.raises(RunNotFoundError):
            await control("nobody")


@runlane.step(name="pause.slot", queue="pause.one")
async def slot(name: str) -> str:
    calls.hit(name)
    if name == "first":
        await gates[0].wait()
    return name


@runlane.workflow(name="pause.queued")
async def queued(ctx: runlane.Context, name: str) -> str:
    return str(await ctx.step(slot, name))


async def test_a_paused_run_waiting_for_a_step_queue_does_not_hold_up_the_line(
    make_engine: Any,
) -> None:
    engine = await make_engine(queued, queues=[StepQueue("pause.one", concurrency=1)])
    gates.append(asyncio.Event())
    await engine.start(queued, "first", run_id="first")
    turn = asyncio.create_task(engine.run_pending())  # its step holds the one slot
    for _ in range(500):
        if calls["first"]:
            break
        await asyncio.sleep(0.01)
    await engine.start(queued, "second", run_id="second")
    await engine.start(queued, "third", run_id="third")
    await engine.run_pending()
    assert [await status(engine, r) for r in ("second", "third")] == [RunStatus.BLOCKED] * 2
    assert await engine.pause("second") is True
    gates[0].set()
    await turn
    assert (await settle(engine, "third")).output == "third"  # not behind the paused one
    assert calls["second"] == 0 and await status(engine, "second") == RunStatus.PAUSED
    assert await engine.resume("second") is True
    assert (await settle(engine, "second")).output == "second"
