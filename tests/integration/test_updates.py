"""Updates on every store: a request into a running workflow, answered by its body.

The engines here are driven by hand (``tick``) on a manual clock; an ``engine.update`` call
runs as a task beside the ticks, since it returns only once the body answered."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import runlane
from runlane import (
    Engine,
    RunlaneError,
    RunNotFoundError,
    RunStatus,
    Update,
    UpdateRejectedError,
    UpdateTimeoutError,
)
from runlane.models import StepKind

from ..helpers import Calls, settle

calls = Calls()


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    calls.counts.clear()


async def send(engine: Engine, run_id: str, name: str, payload: Any = None, **kw: Any) -> Any:
    """An ``engine.update`` call as a task, returned once its update is delivered."""
    before = len(await engine.store.list_signals(run_id)) if await engine.get_run(run_id) else 0
    task = asyncio.create_task(engine.update(run_id, name, payload, **kw))
    for _ in range(500):
        if task.done() or len(await engine.store.list_signals(run_id)) > before:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"update {name!r} of {run_id} not delivered; the call: {task!r}")


async def answer_of(engine: Engine, task: asyncio.Task[Any], *, ticks: int = 20) -> Any:
    """Tick until the update's caller has its answer (its reply, or the error it raised)."""
    for _ in range(ticks):
        if task.done():
            break
        await engine.tick()
        await asyncio.sleep(0.05)  # the caller reads the store (it heard of the answer)
    return await asyncio.wait_for(task, timeout=5)


# ---------------------------------------------------------------- answers


@runlane.workflow(name="updates.adder")
async def adder(ctx: runlane.Context, base: int) -> str:
    calls.hit("turns")
    update = await ctx.wait_for_update("add")
    await ctx.reply(update, base + int(update.payload))
    update = await ctx.wait_for_update("add")
    await ctx.reply(update, error=f"only one add, not {update.payload}")
    return "done"


async def test_an_update_returns_the_workflows_reply(make_engine: Any) -> None:
    engine = await make_engine(adder)
    await engine.start(adder, 10, run_id="r")
    await engine.tick()
    assert await answer_of(engine, await send(engine, "r", "add", 5)) == 15
    steps = await engine.list_steps("r")
    assert [(s.kind, s.name, s.status) for s in steps[:2]] == [
        (StepKind.UPDATE, "add", "completed"),
        (StepKind.REPLY, "add", "completed"),
    ]
    assert steps[0].output["payload"] == 5 and steps[1].output == 15
    assert steps[1].input == {"update": steps[0].output["id"]}


async def test_a_rejected_update_raises_with_the_workflows_reason(make_engine: Any) -> None:
    engine = await make_engine(adder)
    await engine.start(adder, 10, run_id="r")
    await answer_of(engine, await send(engine, "r", "add", 1))
    with pytest.raises(UpdateRejectedError) as rejected:
        await answer_of(engine, await send(engine, "r", "add", 2))
    assert (rejected.value.run_id, rejected.value.name) == ("r", "add")
    assert rejected.value.message == "only one add, not 2"
    assert (await settle(engine, "r")).output == "done"


async def test_updates_of_unknown_and_finished_runs_are_refused_at_once(make_engine: Any) -> None:
    engine = await make_engine(adder)
    with pytest.raises(RunNotFoundError):
        await engine.update("nope", "add", 1)
    await engine.start(adder, 10, run_id="r")
    await engine.cancel("r")
    began = time.monotonic()
    with pytest.raises(UpdateRejectedError, match="already cancelled"):
        await engine.update("r", "add", 1)
    assert time.monotonic() - began < 1


async def test_bad_updates_are_refused_before_anything_is_sent(make_engine: Any) -> None:
    engine = await make_engine(adder)
    await engine.start(adder, 10, run_id="r")
    with pytest.raises(ValueError, match="needs a name"):
        await engine.update("r", "", 1)
    with pytest.raises(ValueError, match="timeout"):
        await engine.update("r", "add", 1, timeout=0)
    with pytest.raises(runlane.SerializationError):
        await engine.update("r", "add", {1, 2})
    with pytest.raises(ValueError, match="updates'"):
        await engine.signal("r", "$update:add", 1)
    assert await engine.store.list_signals("r") == []


@runlane.workflow(name="updates.ignores")
async def ignores(ctx: runlane.Context, _: Any) -> str:
    await ctx.wait_for_signal("finish")
    return "finished"


async def test_an_update_times_out_and_stays_delivered(make_engine: Any) -> None:
    engine = await make_engine(ignores)
    await engine.start(ignores, None, run_id="r")
    await engine.tick()
    with pytest.raises(TimeoutError, match=r"not answered within 0\.2s"):
        await engine.update("r", "add", 1, timeout=0.2)
    [buffered] = await engine.store.list_signals("r")
    assert buffered.name == "$update:add" and buffered.payload["payload"] == 1


@runlane.workflow(name="updates.patient")
async def patient(ctx: runlane.Context, _: Any) -> str:
    try:
        update = await ctx.wait_for_update("ask", timeout=30)
    except UpdateTimeoutError as exc:
        return f"timed out: {exc}"
    await ctx.reply(update, "yes")
    return "answered"


async def test_a_wait_for_an_update_times_out_with_a_catchable_error(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(patient)
    await engine.start(patient, None, run_id="r")
    await engine.tick()
    clock.advance(31)
    run = await settle(engine, "r")
    assert run.output == "timed out: no update 'ask' within the timeout"


# ---------------------------------------------------------------- races


async def test_an_update_racing_the_runs_end_is_rejected_without_waiting_for_its_timeout(
    make_engine: Any,
) -> None:
    engine = await make_engine(ignores)
    await engine.start(ignores, None, run_id="r")
    await engine.tick()
    asking = await send(engine, "r", "add", 1, timeout=30)
    await engine.signal("r", "finish")
    began = time.monotonic()
    with pytest.raises(UpdateRejectedError, match="ended completed without answering"):
        await answer_of(engine, asking)
    assert time.monotonic() - began < 2


async def test_an_update_to_a_run_cancelled_meanwhile_is_rejected(make_engine: Any) -> None:
    engine = await make_engine(ignores)
    await engine.start(ignores, None, run_id="r")
    await engine.tick()
    asking = await send(engine, "r", "add", 1, timeout=30)
    await engine.cancel("r")
    with pytest.raises(UpdateRejectedError, match="ended cancelled"):
        await asyncio.wait_for(asking, timeout=5)


async def test_an_update_answered_on_another_instance_reaches_its_caller_by_polling(
    make_engine: Any,
) -> None:
    runner = await make_engine(adder)
    caller = await make_engine(adder)
    await runner.start(adder, 1, run_id="r")
    await runner.tick()
    asking = await send(caller, "r", "add", 2)
    assert await answer_of(runner, asking) == 3
    with pytest.raises(UpdateRejectedError, match="only one add"):
        await answer_of(runner, await send(caller, "r", "add", 3))


@runlane.workflow(name="updates.counter")
async def counter(ctx: runlane.Context, rounds: int) -> list[Any]:
    seen = []
    for n in range(rounds):
        update = await ctx.wait_for_update("next")
        seen.append(update.payload)
        await ctx.reply(update, {"payload": update.payload, "round": n})
    return seen


async def test_two_updates_of_one_name_are_each_answered_once_in_order(make_engine: Any) -> None:
    engine = await make_engine(counter)
    await engine.start(counter, 2, run_id="r")
    first = await send(engine, "r", "next", "a")
    second = await send(engine, "r", "next", "b")
    assert await answer_of(engine, first) == {"payload": "a", "round": 0}
    assert await answer_of(engine, second) == {"payload": "b", "round": 1}
    assert (await settle(engine, "r")).output == ["a", "b"]
    replies = [s for s in await engine.list_steps("r") if s.kind == StepKind.REPLY]
    assert len(replies) == 2 and len({s.input["update"] for s in replies}) == 2


@runlane.workflow(name="updates.sleeper")
async def sleeper(ctx: runlane.Context, _: Any) -> str:
    calls.hit("turns")
    await ctx.sleep(60)
    update = await ctx.wait_for_update("ask")
    await ctx.reply(update, "awake")
    return "done"


async def test_an_update_to_a_sleeping_run_waits_until_the_body_asks_for_it(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sleeper)
    await engine.start(sleeper, None, run_id="r")
    await engine.tick()
    asleep = await engine.get_run("r")
    asking = await send(engine, "r", "ask", timeout=30)
    for _ in range(3):
        await engine.tick()
    run = await engine.get_run("r")
    assert (run.status, run.wake_at, calls["turns"]) == (RunStatus.SUSPENDED, asleep.wake_at, 1)
    assert not asking.done()
    clock.advance(60)
    assert await answer_of(engine, asking) == "awake"
    assert calls["turns"] == 2


@runlane.step(name="updates.after")
async def after_reply(_: Any) -> str:
    if calls.hit("after") == 1:
        await asyncio.Event().wait()  # the process "dies" here: the turn never ends
    return "after"


@runlane.workflow(name="updates.crashes")
async def crashes(ctx: runlane.Context, _: Any) -> str:
    update = await ctx.wait_for_update("ask")
    await ctx.reply(update, f"hello {update.payload}")
    return str(await ctx.step(after_reply, None))


async def test_a_replay_after_a_crash_between_the_reply_and_the_next_step_answers_once(
    make_engine: Any, clock: Any
) -> None:
    doomed = await make_engine(crashes, lease=10)
    survivor = await make_engine(crashes, lease=10)
    await doomed.start(crashes, None, run_id="r")
    asking = await send(doomed, "r", "ask", "you")
    turn = asyncio.create_task(doomed.tick())
    assert await asyncio.wait_for(asking, timeout=5) == "hello you"
    for _ in range(100):
        if calls["after"]:
            break
        await asyncio.sleep(0.01)
    await doomed.drain(timeout=0.1)  # the turn in flight is cut off, its lease left to expire
    turn.cancel()
    [answered] = [s for s in await survivor.list_steps("r") if s.kind == StepKind.REPLY]
    clock.advance(11)
    await survivor.recover_incomplete()
    run = await settle(survivor, "r")
    assert (run.status, run.output, calls["after"]) == (RunStatus.COMPLETED, "after", 2)
    replies = [s for s in await survivor.list_steps("r") if s.kind == StepKind.REPLY]
    assert replies == [answered]  # the replay wrote no second answer


@runlane.workflow(name="updates.twice")
async def twice(ctx: runlane.Context, _: Any) -> str:
    update = await ctx.wait_for_update("ask")
    await ctx.reply(update, 1)
    try:
        await ctx.reply(update, 2)
    except RunlaneError as exc:
        return str(exc)
    return "answered twice"


async def test_an_update_is_answered_once_and_a_second_reply_is_refused(make_engine: Any) -> None:
    engine = await make_engine(twice)
    await engine.start(twice, None, run_id="r")
    assert await answer_of(engine, await send(engine, "r", "ask")) == 1
    run = await settle(engine, "r")
    assert run.output.startswith("update 'ask' (") and run.output.endswith("was answered already")


async def test_reply_takes_an_update_and_a_value_or_a_reason() -> None:
    @runlane.workflow(name="updates.misuse")
    async def misuse(ctx: runlane.Context, how: str) -> None:
        if how == "not an update":
            await ctx.reply("ask", 1)  # type: ignore[arg-type]
        update = await ctx.wait_for_update("ask")
        await ctx.reply(update, 1, error="both")

    async with Engine("memory://", workflows=[misuse], poll_interval=0.02) as engine:
        for how in ("not an update", "both"):
            await engine.start(misuse, how, run_id=how)
        with pytest.raises(UpdateRejectedError):
            await engine.update("both", "ask", timeout=5)
        failed = [await engine.wait_for_run(how, timeout=5) for how in ("not an update", "both")]
    assert [(r.error or {}).get("type") for r in failed] == ["DefinitionError"] * 2


def test_an_update_is_a_frozen_record_of_name_payload_and_id() -> None:
    update = Update("ask", {"n": 1}, "id-1")
    with pytest.raises(AttributeError):
        update.name = "other"  # type: ignore[misc]
    assert (update.name, update.payload, update.id) == ("ask", {"n": 1}, "id-1")


async def test_update_waits_with_no_limit_when_timeout_is_none(make_engine: Any) -> None:
    engine = await make_engine(adder)
    await engine.start(adder, 1, run_id="r")
    asking = await send(engine, "r", "add", 1, timeout=None)
    assert await answer_of(engine, asking) == 2


GATE: dict[str, asyncio.Event] = {}


@runlane.step(name="updates.gated")
async def gated(name: str) -> str:
    await GATE.setdefault(name, asyncio.Event()).wait()
    return name


@runlane.workflow(name="updates.busy")
async def busy(ctx: runlane.Context, name: str) -> Any:
    await ctx.step(gated, name)
    update = await ctx.wait_for_update("ask")
    await ctx.reply(update, f"after {name}")
    return "done"


async def test_an_update_sent_while_a_turn_runs_is_taken_by_the_next_turn(
    make_engine: Any,
) -> None:
    """The turn read the run's signals when it was claimed, before the update came: its
    suspension finds the wake the update stamped, and the run is due again at once."""
    engine = await make_engine(busy)
    name = f"busy-{id(engine)}"
    await engine.start(busy, name, run_id="r")
    turn = asyncio.create_task(engine.tick())
    for _ in range(1000):  # up to 10 s on a loaded machine
        if name in GATE:  # the step runs: the turn holds the run
            break
        await asyncio.sleep(0.01)
    assert (await engine.get_run("r")).status == RunStatus.RUNNING
    asking = await send(engine, "r", "ask")
    GATE[name].set()
    await turn
    assert await answer_of(engine, asking) == f"after {name}"


async def test_an_update_whose_caller_meets_a_store_outage_is_answered_once_it_is_back(
    make_engine: Any,
) -> None:
    from tests.outages import FlakyStore

    engine = await make_engine(adder)
    await engine.start(adder, 1, run_id="r")
    await engine.tick()
    flaky = FlakyStore(engine.store)
    caller = Engine(flaky, clock=engine.clock, drive=False)
    asking = await send(caller, "r", "add", 2)
    flaky.down = True
    await engine.tick()  # the runner's own store answers: it replies
    await asyncio.sleep(0.3)  # the caller's reads fail meanwhile
    assert not asking.done() and flaky.fired > 0
    flaky.down = False
    assert await asyncio.wait_for(asking, timeout=5) == 3


async def test_an_update_whose_store_stays_out_raises_store_unavailable_at_its_timeout(
    make_engine: Any,
) -> None:
    from tests.outages import FlakyStore

    engine = await make_engine(adder)
    await engine.start(adder, 1, run_id="r")
    flaky = FlakyStore(engine.store)
    caller = Engine(flaky, clock=engine.clock, drive=False)
    asking = await send(caller, "r", "add", 2, timeout=0.5)
    flaky.down = True
    with pytest.raises(runlane.StoreUnavailableError):
        await asyncio.wait_for(asking, timeout=5)
