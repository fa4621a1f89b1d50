"""The engine core on every store: replay, steps, timers, signals, children, recovery."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

import runlane
from runlane import (
    ChildFailedError,
    FatalError,
    GatherError,
    Retry,
    RunExistsError,
    RunStatus,
    SerializationError,
    Settled,
    SignalTimeoutError,
    UnknownWorkflowError,
)
from runlane.clock import SystemClock
from runlane.errors import RunFinishedError, RunNotFoundError
from runlane.models import RetryTimer

from ..helpers import Calls, count_claims, settle

calls = Calls()

NO_WAIT = RetryTimer(0.0, 0.0)  # a denied waiter is due again at once


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    calls.counts.clear()


@runlane.step(name="count")
def count(name: str) -> int:
    return calls.hit(name)


@runlane.step(name="double")
async def double(x: int) -> int:
    return x * 2


@runlane.step(name="flaky", retry=Retry(max_attempts=3, backoff=2.0))
def flaky(fail_times: int) -> str:
    if calls.hit("flaky") <= fail_times:
        raise ValueError(f"flaky attempt {calls['flaky']}")
    return "ok"


@runlane.step(name="fatal", retry=Retry(max_attempts=5))
def fatal(_: Any) -> None:
    calls.hit("fatal")
    raise FatalError("card declined")


@runlane.workflow(name="steps")
async def steps_wf(ctx: runlane.Context, x: int) -> dict[str, Any]:
    a = await ctx.step(count, "a")
    await ctx.sleep(5)
    b = await ctx.step(double, x)
    return {"a": a, "b": b}


async def test_steps_run_once_and_replay_their_recorded_results(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(steps_wf)
    await engine.start(steps_wf, 21, run_id="r")
    await engine.tick()
    assert (await engine.get_run("r")).status == RunStatus.SUSPENDED
    clock.advance(5)
    run = await settle(engine, "r")
    assert run.status == RunStatus.COMPLETED
    assert run.output == {"a": 1, "b": 42}
    assert calls["a"] == 1
    steps = await engine.list_steps("r")
    assert [(s.seq, s.kind, s.status) for s in steps] == [
        (1, "step", "completed"),
        (2, "sleep", "completed"),
        (3, "step", "completed"),
    ]
    assert steps[0].attempts == 1 and steps[0].started_at is not None


async def test_a_sleep_is_not_resumed_before_its_wake_time(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(steps_wf)
    await engine.start(steps_wf, 1, run_id="r")
    await engine.tick()
    clock.advance(4.9)
    await engine.tick()
    run = await engine.get_run("r")
    assert run.status == RunStatus.SUSPENDED
    assert run.wake_at == clock.now() + timedelta(seconds=0.1)


@runlane.workflow(name="flaky-wf")
async def flaky_wf(ctx: runlane.Context, fail_times: int) -> Any:
    return await ctx.step(flaky, fail_times)


async def test_a_failing_step_is_retried_with_durable_backoff(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(flaky_wf)
    await engine.start(flaky_wf, 2, run_id="r")
    await engine.tick()
    run = await engine.get_run("r")
    assert run.status == RunStatus.SUSPENDED
    assert timedelta(seconds=1.5) <= run.wake_at - clock.now() <= timedelta(seconds=2)
    clock.advance(2)
    await engine.tick()
    clock.advance(4)
    run = await settle(engine, "r")
    assert run.output == "ok"
    [step] = await engine.list_steps("r")
    assert step.attempts == 3 and step.status == "completed"


async def test_retries_run_out_and_the_run_fails_with_the_step_error(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(flaky_wf)
    await engine.start(flaky_wf, 10, run_id="r")
    for _ in range(4):
        await engine.tick()
        clock.advance(60)
    run = await settle(engine, "r")
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "ValueError"
    assert run.error["message"] == "flaky attempt 3"
    assert "Traceback" in run.error["traceback"]
    assert calls["flaky"] == 3


async def test_a_step_that_failed_every_attempt_keeps_each_attempts_error_and_times(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(flaky_wf)
    await engine.start(flaky_wf, 10, run_id="r")
    began = clock.now()
    for _ in range(4):
        await engine.tick()
        clock.advance(60)
    await settle(engine, "r")
    [step] = await engine.list_steps("r")
    assert (step.status, step.attempts) == ("failed", 3)
    history = step.error["attempts"]
    assert [(a["attempt"], a["type"], a["message"]) for a in history] == [
        (n, "ValueError", f"flaky attempt {n}") for n in (1, 2, 3)
    ]
    starts = [datetime.fromisoformat(a["started_at"]) for a in history]
    assert starts == [began + timedelta(seconds=60 * n) for n in range(3)]
    assert all(a["finished_at"] == a["started_at"] for a in history)  # the clock stood still
    assert step.started_at == starts[-1]


@runlane.workflow(name="fatal-wf")
async def fatal_wf(ctx: runlane.Context, _: Any) -> None:
    await ctx.step(fatal, None)


async def test_a_fatal_error_is_never_retried(make_engine: Any) -> None:
    engine = await make_engine(fatal_wf)
    await engine.start(fatal_wf, None, run_id="r")
    run = await settle(engine, "r")
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "FatalError"
    assert calls["fatal"] == 1


@runlane.workflow(name="caught")
async def caught_wf(ctx: runlane.Context, _: Any) -> str:
    try:
        await ctx.step(fatal, None)
    except FatalError as exc:
        await ctx.sleep(1)
        return f"handled: {exc}"
    return "unreachable"


async def test_a_caught_step_failure_replays_as_the_same_exception(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(caught_wf)
    await engine.start(caught_wf, None, run_id="r")
    await engine.tick()
    clock.advance(1)
    run = await settle(engine, "r")
    assert run.output == "handled: card declined"
    assert calls["fatal"] == 1


@runlane.workflow(name="signals")
async def signals_wf(ctx: runlane.Context, _: Any) -> Any:
    first = await ctx.wait_for_signal("go")
    try:
        second = await ctx.wait_for_signal("again", timeout=10)
    except SignalTimeoutError:
        second = "timed out"
    return [first, second]


async def test_a_signal_sent_before_the_wait_is_buffered(make_engine: Any) -> None:
    engine = await make_engine(signals_wf)
    await engine.start(signals_wf, None, run_id="r")
    await engine.signal("r", "go", {"n": 1})
    await engine.signal("r", "again", 2)
    run = await settle(engine, "r")
    assert run.output == [{"n": 1}, 2]


async def test_a_signal_wait_times_out_with_a_catchable_error(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(signals_wf)
    await engine.start(signals_wf, None, run_id="r")
    await engine.tick()
    await engine.signal("r", "go", "first")
    await engine.tick()
    run = await engine.get_run("r")
    assert run.status == RunStatus.SUSPENDED
    clock.advance(10)
    run = await settle(engine, "r")
    assert run.output == ["first", "timed out"]


async def test_signals_for_unknown_or_finished_runs_are_refused(make_engine: Any) -> None:
    engine = await make_engine(signals_wf)
    with pytest.raises(RunNotFoundError):
        await engine.signal("nope", "go")
    await engine.start(signals_wf, None, run_id="r")
    await engine.cancel("r")
    with pytest.raises(RunFinishedError):
        await engine.signal("r", "go")


@runlane.workflow(name="recorded")
async def recorded_wf(ctx: runlane.Context, _: Any) -> Any:
    now = ctx.now()
    token = await ctx.side_effect(lambda: calls.hit("token"))
    await ctx.sleep(1)
    return [now.isoformat(), token]


async def test_now_and_side_effects_are_recorded_once(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(recorded_wf)
    started_at = clock.now()
    await engine.start(recorded_wf, None, run_id="r")
    await engine.tick()
    clock.advance(1)
    run = await settle(engine, "r")
    assert run.output == [started_at.isoformat(), 1]
    assert calls["token"] == 1


@runlane.workflow(name="child")
async def child_wf(ctx: runlane.Context, x: int) -> Any:
    if x < 0:
        raise ValueError("negative")
    return await ctx.step(double, x)


@runlane.workflow(name="parent")
async def parent_wf(ctx: runlane.Context, xs: list[int]) -> Any:
    single = await ctx.child(child_wf, 5)
    many = await ctx.all([ctx.child(child_wf, x) for x in xs])
    fired = await ctx.start_child(child_wf, 100, run_id=f"{ctx.run_id}-fired")
    return {"single": single, "many": many, "fired": fired}


async def test_children_run_and_their_outputs_reach_the_parent(make_engine: Any) -> None:
    engine = await make_engine(parent_wf, child_wf)
    await engine.start(parent_wf, [1, 2, 3], run_id="p")
    run = await settle(engine, "p")
    assert run.output == {"single": 10, "many": [2, 4, 6], "fired": "p-fired"}
    child = await engine.get_run("p.child.1")
    assert child is not None and child.parent_id == "p"
    assert (await settle(engine, "p-fired")).output == 200


@runlane.workflow(name="parent-failing")
async def failing_parent(ctx: runlane.Context, _: Any) -> Any:
    try:
        await ctx.child(child_wf, -1)
    except ChildFailedError as exc:
        first = exc.child_id
    settled = await ctx.all_settled([ctx.child(child_wf, 1), ctx.child(child_wf, -2)])
    try:
        await ctx.all([ctx.child(child_wf, 3), ctx.child(child_wf, -3)])
    except GatherError as exc:
        return {
            "first": first,
            "settled": [s.ok for s in settled],
            "gather": [f["index"] for f in exc.failures],
        }
    return None


async def test_failed_children_raise_child_failed_and_gather_errors(make_engine: Any) -> None:
    engine = await make_engine(failing_parent, child_wf)
    await engine.start(failing_parent, None, run_id="p")
    run = await settle(engine, "p")
    assert run.output == {"first": "p.child.1", "settled": [True, False], "gather": [1]}


@runlane.workflow(name="fan")
async def fan_wf(ctx: runlane.Context, n: int) -> Any:
    results = await ctx.all_settled([ctx.step(double, i) for i in range(n)])
    return sum(r.value for r in results if isinstance(r, Settled) and r.ok)


async def test_steps_fan_out_in_process(make_engine: Any) -> None:
    engine = await make_engine(fan_wf)
    await engine.start(fan_wf, 20, run_id="f")
    assert (await settle(engine, "f")).output == sum(i * 2 for i in range(20))


@runlane.workflow(name="looper")
async def looper(ctx: runlane.Context, n: int) -> Any:
    if n < 3:
        ctx.continue_as_new(n + 1)
    return n


async def test_continue_as_new_chains_fresh_runs(make_engine: Any) -> None:
    engine = await make_engine(looper)
    await engine.start(looper, 0, run_id="loop")
    first = await settle(engine, "loop")
    assert first.status == RunStatus.COMPLETED
    assert first.output == {"continued_as": "loop~1"}
    assert (await settle(engine, "loop~3")).output == 3


@runlane.workflow(name="waits-child")
async def waits_child(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.child(signals_wf, None)


async def test_cancel_cascades_to_children_and_is_false_when_nothing_to_cancel(
    make_engine: Any,
) -> None:
    engine = await make_engine(waits_child, signals_wf)
    await engine.start(waits_child, None, run_id="p")
    await engine.tick()
    assert (await engine.get_run("p.child.1")).status == RunStatus.SUSPENDED
    assert await engine.cancel("p") is True
    assert (await engine.get_run("p")).status == RunStatus.CANCELLED
    assert (await engine.get_run("p.child.1")).status == RunStatus.CANCELLED
    assert await engine.cancel("p") is False
    assert await engine.cancel("missing") is False


@runlane.workflow(name="minds-child")
async def minds_child(ctx: runlane.Context, _: Any) -> Any:
    try:
        return await ctx.child(signals_wf, None)
    except ChildFailedError as exc:
        return f"child {exc.child_id} did not complete"


async def test_cancelling_a_child_resumes_its_waiting_parent_at_once(make_engine: Any) -> None:
    """The parent the cancellation woke runs now, not at a timer poll 30 s away."""
    engine = await make_engine(
        minds_child, signals_wf, drive=True, clock=SystemClock(), poll_interval=30
    )
    await engine.__aenter__()
    await engine.start(minds_child, None, run_id="p")
    for _ in range(500):
        child = await engine.get_run("p.child.1")
        if child is not None and child.status == RunStatus.SUSPENDED:
            break
        await asyncio.sleep(0.01)
    assert await engine.cancel("p.child.1")
    parent = await engine.wait_for_run("p", timeout=5)
    assert parent.output == "child p.child.1 did not complete"


@runlane.workflow(name="two-phase")
async def two_phase(ctx: runlane.Context, _: Any) -> Any:
    a = await ctx.step(count, "first")
    b = await ctx.step(flaky, 1 if calls["flaky"] == 0 else 0)
    return [a, b]


async def test_requeue_reuses_completed_checkpoints(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(two_phase)
    await engine.start(two_phase, None, run_id="r")
    await engine.tick()
    await engine.cancel("r")
    assert (await engine.get_run("r")).status == RunStatus.CANCELLED
    requeued = await engine.requeue("r")
    assert requeued.status == RunStatus.PENDING
    clock.advance(60)
    run = await settle(engine, "r")
    assert run.status == RunStatus.COMPLETED
    assert calls["first"] == 1


@runlane.workflow(name="shape-a")
async def shape_a(ctx: runlane.Context, _: Any) -> Any:
    await ctx.step(count, "x")
    await ctx.sleep(1)
    return "a"


async def test_changed_code_fails_the_run_with_non_determinism(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(shape_a)
    await engine.start(shape_a, None, run_id="r")
    await engine.tick()

    @runlane.workflow(name="shape-a", version="1")
    async def shape_b(ctx: runlane.Context, _: Any) -> Any:
        await ctx.sleep(1)
        return "b"

    other = await make_engine(shape_b)
    clock.advance(1)
    await other.tick()
    run = await engine.get_run("r")
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "NonDeterminismError"


async def test_bad_input_is_refused_before_anything_is_written(make_engine: Any) -> None:
    engine = await make_engine(steps_wf)
    with pytest.raises(SerializationError):
        await engine.start(steps_wf, {"when": object()}, run_id="r")
    with pytest.raises(UnknownWorkflowError):
        await engine.start("nope", {}, run_id="r")
    assert await engine.get_run("r") is None
    with pytest.raises(SerializationError):
        await engine.signal("r", "x", {1, 2})


async def test_start_is_idempotent_by_run_id(make_engine: Any) -> None:
    engine = await make_engine(steps_wf)
    first = await engine.start(steps_wf, 1, run_id="r")
    again = await engine.start(steps_wf, 2, run_id="r")
    assert again.input == 1 and again.created_at == first.created_at
    with pytest.raises(RunExistsError) as info:
        await engine.start(steps_wf, 1, run_id="r", if_exists="fail")
    assert info.value.run_id == "r" and info.value.status == "pending"


@runlane.workflow(name="order")
async def order_wf(ctx: runlane.Context, name: str) -> str:
    calls.counts.setdefault("order", 0)
    calls.counts[f"order:{calls.hit('order')}"] = 0
    return name


async def test_pending_runs_go_by_priority_then_age(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(order_wf, max_local_runs=1)
    await engine.start(order_wf, "old", run_id="old")
    clock.advance(1)
    await engine.start(order_wf, "urgent", run_id="urgent", priority=5)
    clock.advance(1)
    await engine.start(order_wf, "new", run_id="new")
    ids = await engine.store.pending_run_ids(clock.now(), 10, None)
    assert ids == ["urgent", "old", "new"]


async def test_an_expired_lease_is_recovered_and_a_poison_run_goes_dead(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(steps_wf, max_recovery_attempts=1, lease=10)
    await engine.start(steps_wf, 1, run_id="r")
    now = clock.now()
    await engine.store.claim_run(
        "r", "ghost:1", now, now + timedelta(seconds=10), singleton_retry=NO_WAIT
    )
    clock.advance(11)
    await engine.recover_incomplete()
    assert (await engine.get_run("r")).status == RunStatus.SUSPENDED
    await engine.store.claim_run(
        "r",
        "ghost:2",
        clock.advance(5),
        clock.now() + timedelta(seconds=10),
        singleton_retry=NO_WAIT,
    )
    clock.advance(11)
    await engine.recover_incomplete()
    run = await engine.get_run("r")
    assert run.status == RunStatus.DEAD
    assert run.error["type"] == "RecoveryLimitExceeded"


@runlane.step(name="outlasting")
async def outlasting_step(name: str) -> int:
    await asyncio.sleep(0.8)
    return calls.hit(name)


@runlane.workflow(name="long-turn")
async def long_wf(ctx: runlane.Context, name: str) -> int:
    return int(await ctx.step(outlasting_step, name))


async def test_a_turn_longer_than_its_lease_keeps_it(make_engine: Any) -> None:
    """The lease keeper renews every lease in flight; another engine never recovers them."""
    real = {"clock": SystemClock(), "lease": 0.3, "poll_interval": 0.05}
    busy = await make_engine(long_wf, **real)
    other = await make_engine(long_wf, **real, drive=True)
    await other.__aenter__()
    names = [f"long-{n}" for n in range(5)]
    for name in names:
        await busy.start(long_wf, name, run_id=name)
    await busy.tick()  # claims all five and runs their turns, 0.8 s each, at once
    for name in names:
        assert (await other.wait_for_run(name, timeout=10)).status == RunStatus.COMPLETED
    assert all(calls.counts[name] == 1 for name in names), calls.counts


@runlane.workflow(name="direct")
async def direct_wf(ctx: runlane.Context, x: int) -> int:
    return int(await ctx.step(double, x))


async def test_a_run_started_on_a_driving_engine_is_claimed_by_its_start(
    make_engine: Any,
) -> None:
    """The start leases the run to the engine that will execute it: no claim of its own."""
    engine = await make_engine(direct_wf, drive=True, clock=SystemClock(), poll_interval=0.05)
    await engine.__aenter__()
    claims = count_claims(engine)
    runs = [await engine.start(direct_wf, n, run_id=f"d{n}") for n in range(10)]
    assert all(run.status == RunStatus.PENDING for run in runs)
    done = [await engine.wait_for_run(run.id, timeout=10) for run in runs]
    assert [d.output for d in done] == [2 * n for n in range(10)]
    assert claims == []


@runlane.workflow(name="slow", execution_timeout=30)
async def slow_wf(ctx: runlane.Context, _: Any) -> Any:
    await ctx.child(signals_wf, None)


async def test_execution_timeout_cancels_the_run_and_its_subtree(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(slow_wf, signals_wf)
    await engine.start(slow_wf, None, run_id="s")
    await engine.tick()
    clock.advance(31)
    await engine.tick()
    run = await engine.get_run("s")
    assert run.status == RunStatus.CANCELLED
    assert run.error["type"] == "ExecutionTimeoutError"
    assert (await engine.get_run("s.child.1")).status == RunStatus.CANCELLED


@runlane.workflow(name="on-order", on_event=("order.placed",))
async def on_order(ctx: runlane.Context, payload: Any) -> Any:
    return payload


@runlane.workflow(name="awaits-event")
async def awaits_event(ctx: runlane.Context, wanted: str) -> Any:
    return await ctx.wait_for_event("order.placed", match=lambda p: p["id"] == wanted)


async def test_events_start_subscribers_and_wake_matching_waiters(make_engine: Any) -> None:
    engine = await make_engine(on_order, awaits_event)
    await engine.start(awaits_event, "B", run_id="w")
    await engine.tick()
    assert await engine.publish_event("order.placed", {"id": "A"}, id="e1") == 2
    assert await engine.publish_event("order.placed", {"id": "A"}, id="e1") == 0
    await engine.tick()
    assert (await engine.get_run("w")).status == RunStatus.SUSPENDED
    await engine.publish_event("order.placed", {"id": "B"}, id="e2")
    assert (await settle(engine, "w")).output == {"id": "B"}
    assert (await settle(engine, "on-order:event:e1")).output == {"id": "A"}


async def test_async_with_drives_runs_to_completion(make_engine: Any) -> None:
    from runlane.clock import SystemClock

    engine = await make_engine(
        parent_wf, child_wf, drive=True, clock=SystemClock(), poll_interval=0.05
    )
    async with engine:
        await engine.start(parent_wf, [1, 2], run_id="p")
        run = await engine.wait_for_run("p", timeout=20)
    assert run.output["many"] == [2, 4]


async def test_list_runs_is_newest_first_and_filters(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(steps_wf, order_wf)
    for i in range(3):
        await engine.start(steps_wf, i, run_id=f"s{i}", tags=["batch"])
        clock.advance(1)
    await engine.start(order_wf, "x", run_id="o")
    assert [r.id for r in await engine.list_runs()] == ["o", "s2", "s1", "s0"]
    assert [r.id for r in await engine.list_runs(workflow=steps_wf, limit=2)] == ["s2", "s1"]
    assert [r.id for r in await engine.list_runs(tag="batch", offset=2)] == ["s0"]
    assert [r.id for r in await engine.list_runs(status="pending", workflow="order")] == ["o"]


@runlane.step(name="pause")
async def pause(seconds: float) -> float:
    import asyncio

    await asyncio.sleep(seconds)
    return seconds


@runlane.workflow(name="lane", singleton=runlane.Singleton(key=lambda i: "one-lane"))
async def lane(ctx: runlane.Context, seconds: float) -> Any:
    return await ctx.step(pause, seconds)


async def test_drain_finishes_turns_in_flight_and_takes_no_new_work(make_engine: Any) -> None:
    import asyncio

    from runlane.clock import SystemClock

    engine = await make_engine(lane, drive=True, clock=SystemClock(), poll_interval=0.05)
    async with engine:
        for n in range(5):
            await engine.start(lane, 0.3, run_id=f"l{n}")
        for _ in range(100):
            if (await engine.get_run("l0")).status == RunStatus.RUNNING:
                break
            await asyncio.sleep(0.01)
        await engine.drain(timeout=10)
        statuses = [(await engine.get_run(f"l{n}")).status for n in range(5)]
    assert statuses[0] == RunStatus.COMPLETED
    assert statuses.count(RunStatus.COMPLETED) <= 2, statuses
    assert all(s in (RunStatus.COMPLETED, RunStatus.PENDING, RunStatus.BLOCKED) for s in statuses)


@runlane.step(name="counted-pause")
async def counted_pause(seconds: float) -> float:
    import asyncio

    calls.hit("counted-pause")
    await asyncio.sleep(seconds)
    return seconds


@runlane.workflow(name="one-pause")
async def one_pause(ctx: runlane.Context, seconds: float) -> Any:
    return await ctx.step(counted_pause, seconds)


async def test_drain_drops_the_runs_waiting_for_a_local_slot_and_another_instance_runs_them(
    make_engine: Any,
) -> None:
    import asyncio
    import time

    from runlane.clock import SystemClock

    engine = await make_engine(
        one_pause, drive=True, clock=SystemClock(), poll_interval=30, max_local_runs=1
    )
    async with engine:
        for n in range(4):  # the first takes the one slot; three wait for it
            await engine.start(one_pause, 0.4, run_id=f"d{n}")
        for _ in range(200):
            if calls["counted-pause"]:
                break
            await asyncio.sleep(0.01)
        began = time.monotonic()
        await engine.drain(timeout=10)
        drained_in = time.monotonic() - began
        statuses = [(await engine.get_run(f"d{n}")).status for n in range(4)]
    assert calls["counted-pause"] == 1, "a waiting run's step began after the drain"
    assert statuses == [RunStatus.COMPLETED] + [RunStatus.PENDING] * 3, statuses
    assert drained_in < 0.4 + 0.3, drained_in  # the running turn only
    other = await make_engine(one_pause, drive=True, clock=SystemClock(), poll_interval=0.05)
    async with other:  # the dropped runs stayed due: the next instance's poll runs them
        finals = [await other.wait_for_run(f"d{n}", timeout=10) for n in range(4)]
    assert [run.status for run in finals] == [RunStatus.COMPLETED] * 4
    assert calls["counted-pause"] == 4


@runlane.workflow(name="long-step")
async def long_step(ctx: runlane.Context, seconds: float) -> Any:
    await ctx.step(pause, seconds)
    await ctx.step(count, "after")
    return "finished"


async def test_a_step_finishing_after_cancel_is_discarded_and_never_revives_the_run(
    make_engine: Any,
) -> None:
    import asyncio

    from runlane.clock import SystemClock

    engine = await make_engine(long_step, drive=True, clock=SystemClock(), poll_interval=0.05)
    async with engine:
        await engine.start(long_step, 0.5, run_id="c")
        for _ in range(200):
            if (await engine.get_run("c")).status == RunStatus.RUNNING:
                break
            await asyncio.sleep(0.01)
        assert await engine.cancel("c") is True
        assert (await engine.get_run("c")).status == RunStatus.CANCELLING
        run = await engine.wait_for_run("c", timeout=10)
    assert run.status == RunStatus.CANCELLED
    assert await engine.list_steps("c") == []
    assert calls["after"] == 0
