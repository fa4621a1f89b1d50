"""Fencing tokens, on every store: an execution of a step that another instance took over since
presents a lower fence than the execution that took over, so a system that refuses lower
fences accepts one write per step; a result of the older execution is dropped.

The "external system" is a :class:`Ledger` that keeps the highest fence it saw per step. A frozen
engine is simulated by holding its step past the lease (its lease keeper stopped, as a frozen
process renews nothing) while another engine recovers the run; a frozen worker by holding its
task while its beats do not get out, past the engine's redispatch window.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import runlane
from runlane import Engine, RunStatus, StepContext, Worker
from runlane.testing import ManualClock
from runlane.transports import InProcessTransport
from runlane.transports.base import Message, Transport

LEASE = 30.0
REDISPATCH = 5.0


class Ledger:
    """A system steps write to that keeps the highest fence it saw per step and refuses a write
    with a lower one (an equal one is the same execution writing again)."""

    def __init__(self) -> None:
        self.highest: dict[str, int] = {}
        self.presented: defaultdict[str, list[int]] = defaultdict(list)
        self.accepted: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()

    def write(self, context: StepContext) -> bool:
        key = context.step_id
        self.presented[key].append(context.fence)
        if context.fence < self.highest.get(key, 0):
            self.refused[key] += 1
            return False
        self.highest[key] = context.fence
        self.accepted[key] += 1
        return True


class Hold:
    """Holds the first execution of a step mid-step (its process frozen) until released."""

    def __init__(self) -> None:
        self.contexts: list[StepContext] = []
        self.holding = asyncio.Event()
        self.released = asyncio.Event()
        self.holds = 1  # how many executions, from the first, are held

    async def enter(self) -> StepContext:
        context = runlane.step_context()
        self.contexts.append(context)
        if len(self.contexts) <= self.holds:
            self.holding.set()
            await self.released.wait()
        return context


ledger = Ledger()
hold = Hold()


@pytest.fixture(autouse=True)
def fresh() -> None:
    global ledger, hold
    ledger, hold = Ledger(), Hold()
    attempts.clear()


@runlane.step(name="fencing.charge")
async def charge(amount: int) -> bool:
    return ledger.write(await hold.enter())


@runlane.workflow(name="fencing.pay")
async def pay(ctx: runlane.Context, amount: int) -> bool:
    return bool(await ctx.step(charge, amount))


@runlane.step(name="fencing.ship", group="fencing")
async def ship(parcel: str) -> dict[str, Any]:
    context = await hold.enter()
    return {"fence": context.fence, "written": ledger.write(context)}


@runlane.workflow(name="fencing.send")
async def send(ctx: runlane.Context, parcel: str) -> Any:
    return await ctx.step(ship, parcel)


@runlane.workflow(name="fencing.send-watched")
async def send_watched(ctx: runlane.Context, parcel: str) -> Any:
    return await ctx.step("fencing.ship", parcel, group="fencing", timeout=60.0)


attempts: list[StepContext] = []


@runlane.step(name="fencing.flaky", retry=runlane.Retry(max_attempts=2, backoff=1.0))
def flaky(_: int) -> int:
    context = runlane.step_context()  # a sync step reads it in its thread too
    attempts.append(context)
    if context.attempt == 1:
        raise RuntimeError("the gateway timed out")
    return context.fence


@runlane.workflow(name="fencing.retried")
async def retried_pay(ctx: runlane.Context, amount: int) -> int:
    return int(await ctx.step(flaky, amount))


async def settle_within(condition: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    """Wait (real time) until ``condition()`` (awaited if it must be) holds; say what did not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what} did not happen within {timeout}s")


async def test_a_frozen_engine_resumed_mid_step_presents_a_lower_fence_than_the_takeover(
    make_engine: Any, clock: ManualClock
) -> None:
    frozen = await make_engine(pay, lease=LEASE)
    other = await make_engine(pay, lease=LEASE)
    run = await frozen.start(pay, 10)
    turn = asyncio.create_task(frozen.tick())
    await asyncio.wait_for(hold.holding.wait(), 10)
    await frozen._execution.leases.stop()  # a frozen process renews nothing
    clock.advance(LEASE + 1)
    await other.tick()  # recovers the run and executes the step again, to the end
    taken_over = await other.store.get_run(run.id)
    assert taken_over is not None and (taken_over.status, taken_over.output) == (
        RunStatus.COMPLETED,
        True,
    )

    hold.released.set()  # the frozen engine resumes mid-step, writes, and its turn is refused
    await asyncio.wait_for(turn, 10)

    step = f"{run.id}:1"
    first, second = hold.contexts
    assert (first.run_id, first.seq, first.name) == (run.id, 1, "fencing.charge")
    assert (second.attempt, first.attempt) == (1, 1)
    assert first.fence < second.fence, "the frozen execution's fence is not the lower one"
    assert ledger.presented[step] == [second.fence, first.fence]
    assert (ledger.accepted[step], ledger.refused[step]) == (1, 1)
    final = await other.store.get_run(run.id)
    assert final is not None and (final.status, final.output) == (RunStatus.COMPLETED, True)
    [record] = await other.store.list_steps(run.id)
    assert (record.output, record.fence) == (True, second.fence)


async def test_a_step_run_after_a_failed_attempt_presents_a_greater_fence(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await make_engine(retried_pay, lease=LEASE)
    run = await engine.start(retried_pay, 1)
    await engine.tick()
    clock.advance(2)
    await engine.tick()
    done = await engine.store.get_run(run.id)
    assert done is not None and done.status == RunStatus.COMPLETED
    assert [c.attempt for c in attempts] == [1, 2]
    assert attempts[0].fence < attempts[1].fence


def test_step_context_outside_a_step_says_so() -> None:
    with pytest.raises(runlane.NotInStepError, match="outside a step"):
        runlane.step_context()


# ---------------------------------------------------------------- remote steps


class Muted:
    """A worker's transport whose beats do not get out (its process frozen, or cut off)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    async def publish_heartbeat(self, beat: Message) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


@pytest.fixture
async def remote_fleet(
    make_engine: Any,
) -> AsyncIterator[Callable[..., Any]]:
    """An engine that consumes results and beats on an in-process transport, and workers."""
    transport = InProcessTransport()
    running: list[tuple[Worker, asyncio.Task[None]]] = []

    async def build(
        workflow: Any, redispatch: float = REDISPATCH
    ) -> tuple[Engine, Callable[..., Worker]]:
        engine = await make_engine(
            workflow, lease=LEASE, transport=transport, remote_redispatch=redispatch
        )
        await engine._ready()
        assert engine._execution.remote is not None
        engine._execution.remote.start()

        def worker(*, muted: bool = False, heartbeat_interval: float = 0.1) -> Worker:
            reached: Any = Muted(transport) if muted else transport
            started = Worker(
                "fencing",
                reached,
                steps=[ship],
                concurrency=1,
                poll_timeout=0.1,
                heartbeat_interval=heartbeat_interval,
            )
            running.append((started, asyncio.create_task(started.run())))
            return started

        return engine, worker

    yield build
    hold.released.set()
    for worker, task in running:
        await worker.stop()
        await asyncio.wait_for(task, 10)


def spy_results(engine: Engine) -> list[tuple[int | None, str]]:
    """The fence and verdict of every result the engine records in the store."""
    verdicts: list[tuple[int | None, str]] = []
    store: Any = engine.store
    record = store.record_step_result

    async def recording(*args: Any, **kwargs: Any) -> str:
        verdict = str(await record(*args, **kwargs))
        verdicts.append((kwargs.get("fence"), verdict))
        return verdict

    store.record_step_result = recording
    return verdicts


async def sent_again(
    engine: Engine, worker: Callable[..., Worker], clock: ManualClock, **second: Any
) -> str:
    """A first worker takes the task and holds it, beating once as it takes it and then no more
    (frozen); past the redispatch window the engine sends the task again, under the next
    claim's fence, and a second worker (``second``: its options) takes it. The run's id."""
    worker(heartbeat_interval=3600.0)
    run = await engine.start(send, "parcel")
    await engine.tick()
    await asyncio.wait_for(hold.holding.wait(), 10)
    worker(**second)
    clock.advance(REDISPATCH + 1)
    await engine.tick()
    await settle_within(lambda: len(hold.contexts) == 2, "the second worker's execution")
    return run.id


async def test_a_worker_holding_a_task_past_its_redispatch_presents_a_lower_fence(
    remote_fleet: Any, clock: ManualClock
) -> None:
    engine, worker = await remote_fleet(send)
    verdicts = spy_results(engine)
    run_id = await sent_again(engine, worker, clock)
    await settle_within(lambda: verdicts, "the second execution's result")
    await engine.tick()
    done = await engine.store.get_run(run_id)
    assert done is not None and done.status == RunStatus.COMPLETED, done
    late, takeover = hold.contexts
    assert done.output == {"fence": takeover.fence, "written": True}

    hold.released.set()  # the frozen worker resumes mid-step
    await settle_within(lambda: len(verdicts) == 2, "the frozen worker's result")
    step = f"{run_id}:1"
    assert late.fence < takeover.fence and late.attempt == takeover.attempt == 1
    assert ledger.presented[step] == [takeover.fence, late.fence]
    assert (ledger.accepted[step], ledger.refused[step]) == (1, 1)
    assert verdicts == [(takeover.fence, "recorded"), (late.fence, "dropped")]


async def test_a_result_of_an_older_dispatch_is_dropped_while_the_newer_one_runs(
    remote_fleet: Any, clock: ManualClock
) -> None:
    # Both executions are held; the older one finishes first, while the record awaits the
    # newer one's result under the same attempt: only the fence tells them apart.
    hold.holds = 2
    engine, worker = await remote_fleet(send)
    verdicts = spy_results(engine)
    run_id = await sent_again(engine, worker, clock, heartbeat_interval=3600.0)
    late, takeover = hold.contexts

    hold.released.set()
    await settle_within(lambda: len(verdicts) == 2, "both results")
    assert sorted(verdicts) == sorted([(late.fence, "dropped"), (takeover.fence, "recorded")])
    await engine.tick()
    done = await engine.store.get_run(run_id)
    assert done is not None and done.status == RunStatus.COMPLETED
    assert done.output["fence"] == takeover.fence


async def test_a_watched_step_sent_again_goes_under_the_next_claims_fence(
    remote_fleet: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A step with a timeout waits in memory; its first worker took the task but no beat of it
    # got out, so the engine sends it again after the redispatch window: not under the fence
    # it sent it with, but in the next turn, under the next claim's. The first worker's result,
    # coming while the turn waits for the second's, is dropped in memory.
    hold.holds = 2
    engine, worker = await remote_fleet(send_watched, redispatch=0.3)
    worker(muted=True)
    run = await engine.start(send_watched, "parcel")
    turn = asyncio.create_task(engine.tick())
    await asyncio.wait_for(hold.holding.wait(), 10)
    clock.advance(1.0)
    await asyncio.wait_for(turn, 10)  # ends, due now: the task is to go out again
    after = await engine.store.get_run(run.id)
    assert after is not None and after.status == RunStatus.SUSPENDED and after.wake_at is not None
    worker()
    turn = asyncio.create_task(engine.tick())
    await settle_within(lambda: len(hold.contexts) == 2, "the second worker's execution")
    late, takeover = hold.contexts
    assert late.fence < takeover.fence

    caplog.set_level(logging.INFO, logger="runlane.remote.dispatch")
    hold.released.set()
    await asyncio.wait_for(turn, 10)
    done = await engine.store.get_run(run.id)
    assert done is not None and done.status == RunStatus.COMPLETED
    assert done.output["fence"] == takeover.fence
    assert any("sent again since" in r.getMessage() for r in caplog.records), caplog.text


# ---------------------------------------------------------------- a worker's own fences


@runlane.step(name="fencing.note", group="fencing")
def note(_: Any) -> int:
    return runlane.step_context().fence


def step_task(fence: int | None, seq: int = 1) -> dict[str, Any]:
    return {
        "step_id": f"r1:{seq}",
        "run_id": "r1",
        "seq": seq,
        "name": "fencing.note",
        "input": None,
        "attempt": 1,
        **({} if fence is None else {"fence": fence}),
    }


async def results_of(transport: Transport, count: int) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:
        got += await transport.take_results(count - len(got), 0.2)
    assert len(got) == count, got
    assert await transport.take_results(10, 0.3) == [], "a task ran that should not have"
    return got


async def test_a_worker_starts_no_step_task_whose_fence_is_not_above_the_highest_seen(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = InProcessTransport()
    worker = Worker("fencing", transport, steps=[note], concurrency=1, poll_timeout=0.1)
    running = asyncio.create_task(worker.run())
    tasks = [
        step_task(5),
        step_task(3),
        step_task(5),
        step_task(6),
        step_task(None),
        step_task(2, 2),
    ]
    await transport.send_tasks("fencing", tasks)
    results = await results_of(transport, 4)
    await worker.stop()
    await asyncio.wait_for(running, 10)
    assert [(r["seq"], r.get("fence"), r["output"]) for r in results] == [
        (1, 5, 5),
        (1, 6, 6),
        (1, None, 0),  # an engine that sends no fence: the step reads 0
        (2, 2, 2),  # another step of the run has its own fences
    ]
    dropped = [r.getMessage() for r in caplog.records if "dropping step task" in r.getMessage()]
    assert len(dropped) == 2, caplog.text
    assert "under fence 3 (sent again since: fence 5 seen)" in dropped[0]
    assert "under fence 5 (a copy of a task taken already: fence 5 seen)" in dropped[1]


@runlane.step(name="fencing.local-note")
def local_note(_: Any) -> int:
    return runlane.step_context().fence


@runlane.workflow(name="fencing.turn")
async def turn_of(ctx: runlane.Context, _: Any) -> int:
    return int(await ctx.step(local_note, None))  # a local step: run inside the replay


def workflow_task(fence: int) -> dict[str, Any]:
    return {
        "kind": "workflow",
        "task_id": f"t{fence}",
        "run_id": "w1",
        "workflow": "fencing.turn",
        "version": "1",
        "group": "fencing",
        "input": None,
        "attempt": 1,
        "fence": fence,
        "history": [],
        "signals": [],
        "children": {},
    }


async def test_a_worker_replays_no_turn_of_a_run_older_than_one_it_replayed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = InProcessTransport()
    worker = Worker(
        "fencing",
        transport,
        steps=[local_note],
        workflows=[turn_of],
        concurrency=1,
        poll_timeout=0.1,
    )
    running = asyncio.create_task(worker.run())
    await transport.send_tasks("fencing", [workflow_task(4), workflow_task(2)])
    decisions = await results_of(transport, 1)
    await worker.stop()
    await asyncio.wait_for(running, 10)
    [decision] = decisions
    assert decision["task_id"] == "t4"
    assert decision["outcome"] == {"type": "complete", "output": 4}  # its local step read 4
    assert any("dropping turn task of w1 under fence 2" in r.getMessage() for r in caplog.records)
