"""Remote workflow turns on every store: the engine sends turns, in-process Workers decide them.

The engines here have no workflow code (``RemoteWorkflow`` only); the bodies live on the
workers. Real clock, short windows; every wait is bounded and reports what it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

import runlane
from runlane import Engine, RemoteWorkflow, RunStatus, StepQueue, Worker
from runlane.stores.base import Store
from runlane.transports import InProcessTransport
from runlane.transports.base import Message, Transport
from tests.helpers import Calls, settle, settled

calls = Calls()
FAST: dict[str, Any] = {"poll_timeout": 0.05, "heartbeat_interval": 0.05}


@runlane.step(name="wf.inc")
def inc(x: int) -> int:
    calls.hit("inc")
    return x + 1


@runlane.step(name="wf.slow")
async def slow(seconds: float) -> str:
    calls.hit("slow")
    await asyncio.sleep(seconds)
    return "slept"


@runlane.step(name="math.double", group="math")
def double(x: int) -> int:
    calls.hit("double")
    return x * 2


@runlane.workflow(name="child-wf", group="wf")
async def child(ctx: runlane.Context, x: int) -> int:
    return int(await ctx.step(inc, x))


@runlane.workflow(name="tour", group="wf")
async def tour(ctx: runlane.Context, x: int) -> dict[str, Any]:
    a = await ctx.step(inc, x)
    b = await ctx.step(double, a)
    await ctx.sleep(0.05)
    said = await ctx.wait_for_signal("go")
    c = await ctx.child(child, b)
    return {"a": a, "b": b, "said": said, "c": c}


@runlane.workflow(name="fan", group="wf")
async def fan(ctx: runlane.Context, n: int) -> int:
    first = await ctx.all([ctx.step(double, i) for i in range(n)])
    second = await ctx.all([ctx.step(double, i) for i in range(n, 2 * n)])
    return sum(first) + sum(second)


@runlane.workflow(name="patient", group="wf")
async def patient(ctx: runlane.Context, seconds: float) -> Any:
    await ctx.step(slow, seconds)
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="fails", group="wf")
async def fails(ctx: runlane.Context, _: Any) -> None:
    await ctx.step(inc, 1)
    raise ValueError("no good")


@runlane.workflow(name="counter", group="wf")
async def counter(ctx: runlane.Context, n: int) -> Any:
    if n < 3:
        ctx.continue_as_new(n + 1)
    child_id = await ctx.start_child(child, n)
    return {"n": n, "started": child_id}


class Block:
    """When the sync-heavy body below was blocking (it runs in a worker's replay thread)."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self.ended = 0.0  # time.monotonic() once it stopped blocking

    def reset(self) -> None:
        self.began.clear()
        self.ended = 0.0


block = Block()


def _hold(seconds: float) -> None:
    """Sync work: a third of it spinning the CPU, the rest blocked in a sleep."""
    spin_until = time.monotonic() + seconds / 3
    while time.monotonic() < spin_until:
        pass
    time.sleep(seconds * 2 / 3)


@runlane.workflow(name="heavy", group="wf")
async def heavy(ctx: runlane.Context, seconds: float) -> int:
    a = await ctx.step(inc, 1)
    calls.hit("heavy")
    block.began.set()
    _hold(seconds)
    block.ended = time.monotonic()
    return int(await ctx.step(inc, a))


@runlane.step(name="wf.where")
async def where_async() -> dict[str, Any]:
    return {"thread": threading.current_thread().name, "loop": id(asyncio.get_running_loop())}


@runlane.step(name="wf.where_sync")
def where_sync() -> str:
    return threading.current_thread().name


@runlane.workflow(name="where", group="wf")
async def where(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    stepped = await ctx.step(where_async)
    return {"body": threading.current_thread().name, "sync": await ctx.step(where_sync), **stepped}


@runlane.step(name="wf.mark")
async def mark(label: str) -> str:
    calls.hit(label)
    if label == "a":
        await asyncio.sleep(1.0)
    return label


@runlane.workflow(name="marks", group="wf")
async def marks(ctx: runlane.Context, _: Any) -> list[str]:
    return [str(await ctx.step(mark, label)) for label in "abc"]


@runlane.workflow(name="queued", group="wf")
async def queued(ctx: runlane.Context, local: bool) -> int:
    return int(await ctx.step(inc if local else double, 1, queue="slots"))


@runlane.workflow(name="stranded", group="wf")
async def stranded(ctx: runlane.Context, timeout: float) -> Any:
    """Waits for a signal, then for a remote step no worker serves."""
    said = await ctx.wait_for_signal("go")
    return [said, await ctx.step("far.away", said, group="nobody", timeout=timeout)]


@runlane.workflow(name="patching", group="wf")
async def patching(ctx: runlane.Context, x: int) -> int:
    if ctx.patched("double-it"):
        x = int(await ctx.step(double, x))
    await ctx.sleep(0.01)
    ctx.deprecate_patch("nothing-here")
    return x


@runlane.workflow(name="desk", group="wf")
async def desk(ctx: runlane.Context, after: float) -> list[Any]:
    asked = []
    for _ in range(2):
        update = await ctx.wait_for_update("ask")
        asked.append(update.payload)
        if update.payload == "bad":
            await ctx.reply(update, error="a bad question")
        else:
            await ctx.reply(update, await ctx.step(inc, update.payload))
        await ctx.step(slow, after)  # long after the answer: the caller does not wait for it
    return asked


@runlane.workflow(name="nest", group="wf")
async def nest(ctx: runlane.Context, seconds: float) -> Any:
    """A remote parent of a remote child that works ``seconds`` on a worker."""
    return await ctx.child(patient, seconds, run_id=f"{ctx.run_id}.patient")


@runlane.workflow(name="attributed", group="wf")
async def attributed(ctx: runlane.Context, customer: str) -> int:
    ctx.set_attributes({"customer": customer, "stage": "doubling"})
    x = int(await ctx.step(double, 2))  # the worker's decision carries the record
    await ctx.set_attributes({"stage": "sleeping", "x": x})
    await ctx.sleep(0.01)
    ctx.set_attributes({"stage": "done"})
    return x


WORKFLOWS = [
    nest,
    tour,
    child,
    fan,
    patient,
    fails,
    counter,
    heavy,
    where,
    marks,
    queued,
    patching,
    stranded,
    desk,
    attributed,
]
NAMES = (
    "nest",
    "desk",
    "tour",
    "child-wf",
    "fan",
    "patient",
    "fails",
    "counter",
    "heavy",
    "where",
    "marks",
    "queued",
    "patching",
    "stranded",
    "attributed",
)
LOCAL_STEPS = [inc, slow, where_async, where_sync, mark]
DECLARED = [RemoteWorkflow(d, group="wf") for d in NAMES]


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.counts.clear()
    block.reset()


class Duplicating(InProcessTransport):
    """Sends every decision twice: the second must be dropped."""

    sent_twice = 0

    async def send_decision(self, queue: str, decision: Message) -> None:
        await super().send_decision(queue, decision)
        await super().send_decision(queue, dict(decision))
        self.sent_twice += 1


@contextlib.asynccontextmanager
async def fleet(
    store: Store,
    transport: Transport | None = None,
    *,
    workers: int = 1,
    start_workers: bool = True,
    declared: Sequence[Any] = DECLARED,
    **options: Any,
) -> AsyncIterator[tuple[Engine, list[Worker], Transport]]:
    transport = transport or InProcessTransport()
    options.setdefault("poll_interval", 0.05)
    engine = Engine(store, transport=transport, remote_workflows=list(declared), **options)
    crew = [
        Worker("wf", transport, workflows=WORKFLOWS, steps=LOCAL_STEPS, **FAST)
        for _ in range(workers)
    ]
    math = Worker("math", transport, steps=[double], concurrency=32, **FAST)
    tasks = [asyncio.create_task(math.run())]
    if start_workers:
        tasks += [asyncio.create_task(w.run()) for w in crew]
    try:
        async with engine:
            yield engine, crew, transport
    finally:
        for worker in [math, *crew]:
            await worker.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    seen = None
    for _ in range(int(timeout / 0.05)):
        seen = await check()
        if seen:
            return seen
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not true after {timeout}s; last seen {seen!r}")


async def status(engine: Engine, run_id: str) -> RunStatus | None:
    run = await engine.get_run(run_id)
    return run.status if run else None


async def test_an_engine_without_the_code_runs_a_remote_workflow_to_its_end(store: Store) -> None:
    async with fleet(store) as (engine, _, _):
        run = await engine.start("tour", 3, run_id="t1")
        await until(lambda: _waits_for_signal(engine, "t1"), "the run waits for its signal")
        with pytest.raises(TimeoutError):
            await engine.wait_for_run("t1", timeout=0.3)  # waiting is not settling
        await engine.signal(run.id, "go", "yes")
        done = await engine.wait_for_run(run.id, timeout=15)
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output == {"a": 4, "b": 8, "said": "yes", "c": 9}
    assert calls["inc"] == 2 and calls["double"] == 1


async def _waits_for_signal(engine: Engine, run_id: str) -> bool:
    steps = await engine.list_steps(run_id)
    return any(s.kind == "signal" and s.status == "pending" for s in steps)


async def test_a_remote_workflow_answers_updates_before_its_body_goes_on(store: Store) -> None:
    async with fleet(store) as (engine, _, _):
        await engine.start("desk", 1.0, run_id="d1")
        began = time.monotonic()
        assert await engine.update("d1", "ask", 41, timeout=10) == 42
        answered_in = time.monotonic() - began
        with pytest.raises(runlane.UpdateRejectedError, match="a bad question"):
            await engine.update("d1", "ask", "bad", timeout=10)
        done = await settled(engine, "d1", timeout=15)
    assert answered_in < 1.0, f"the answer waited for the step after it: {answered_in:.2f}s"
    assert done.status == RunStatus.COMPLETED and done.output == [41, "bad"]
    replies = [s for s in await engine.list_steps("d1") if s.kind == "reply"]
    assert [(r.status, r.output) for r in replies] == [("completed", 42), ("failed", None)]
    assert calls["inc"] == 1 and calls["slow"] == 2


async def test_a_remote_workflow_paused_while_its_turn_is_out_stops_after_that_turn(
    store: Store,
) -> None:
    # The worker's turn is not interrupted (it cannot hear of the pause): its decision is
    # applied, and the run, which would wait for its signal, is parked paused instead.
    async with fleet(store) as (engine, _, _):
        await engine.start("patient", 0.5, run_id="p1")
        await until(lambda: asyncio.sleep(0, calls["slow"]), "the worker runs the slow step")
        assert await engine.pause("p1") is True
        await until(
            lambda: _status_is(engine, "p1", RunStatus.PAUSED), "the run pauses after its turn"
        )
        record, *_ = await engine.list_steps("p1")
        assert (record.name, record.status) == ("wf.slow", "completed")
        await engine.signal("p1", "go", "later")
        await asyncio.sleep(0.3)  # the signal is kept; no turn goes out
        assert await status(engine, "p1") == RunStatus.PAUSED
        assert await engine.resume("p1") is True
        done = await settled(engine, "p1", timeout=15)
    assert done.status == RunStatus.COMPLETED and done.output == "later"
    assert calls["slow"] == 1


async def test_a_cancel_of_a_parent_reaches_its_remote_child_whose_turn_is_out(
    store: Store,
) -> None:
    async with fleet(store) as (engine, _, _):
        await engine.start("nest", 1.0, run_id="n1")
        await until(lambda: asyncio.sleep(0, calls["slow"]), "the child's step runs on a worker")
        assert await engine.cancel("n1") is True
        parent_run = await settled(engine, "n1", timeout=10)
        child_run = await settled(engine, "n1.patient", timeout=10)
        await asyncio.sleep(1.5)  # the child's turn ends on its worker: its decision is dropped
        assert (await engine.get_run("n1.patient")).status == RunStatus.CANCELLED  # type: ignore[union-attr]
    assert parent_run.status == child_run.status == RunStatus.CANCELLED
    assert calls["slow"] == 1


async def _status_is(engine: Engine, run_id: str, expected: RunStatus) -> bool:
    return await status(engine, run_id) == expected


async def test_a_duplicate_decision_is_dropped(store: Store) -> None:
    duplicating = Duplicating()
    async with fleet(store, duplicating) as (engine, _, _):
        await engine.start("fan", 5, run_id="f1")
        done = await engine.wait_for_run("f1", timeout=15)
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output == 2 * sum(range(10))
    assert calls["double"] == 10  # each remote step dispatched exactly once
    assert duplicating.sent_twice >= 2  # every turn's decision came twice


async def test_a_remote_workflow_records_its_patch_markers_through_its_decisions(
    store: Store,
) -> None:
    async with fleet(store) as (engine, _, _):
        await engine.start("patching", 4, run_id="p1")
        done = await engine.wait_for_run("p1", timeout=15)
    assert done.status == RunStatus.COMPLETED and done.output == 8, done.error
    kinds = [(s.kind, s.name) for s in await engine.list_steps("p1")]
    assert kinds == [("patch", "double-it"), ("step", "math.double"), ("sleep", "sleep")]


async def test_a_remote_workflow_sets_its_attributes_through_its_decisions(
    store: Store,
) -> None:
    async with fleet(store) as (engine, _, _):
        await engine.start("attributed", "acme", run_id="a1", attributes={"source": "api"})
        done = await engine.wait_for_run("a1", timeout=15)
        found = await engine.list_runs(attributes={"customer": "acme", "stage": "done", "x": 4})
    assert done.status == RunStatus.COMPLETED and done.output == 4, done.error
    assert done.attributes == {"source": "api", "customer": "acme", "stage": "done", "x": 4}
    assert [run.id for run in found] == ["a1"]
    records = [(s.kind, s.output) for s in await engine.list_steps("a1")]
    assert records == [
        ("attributes", {"customer": "acme", "stage": "doubling"}),
        ("step", 4),
        ("attributes", {"stage": "sleeping", "x": 4}),
        ("sleep", None),
        ("attributes", {"stage": "done"}),
    ]


async def test_a_fan_of_remote_steps_across_turns_is_dispatched_exactly_once(
    store: Store,
) -> None:
    async with fleet(store) as (engine, _, _):
        await engine.start("fan", 50, run_id="f100")
        done = await engine.wait_for_run("f100", timeout=30)
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output == 2 * sum(range(100)) and calls["double"] == 100


class SlowToReturn(InProcessTransport):
    """Delivers each workflow task at once, but returns to the dispatcher only later: the
    decision comes back (and is applied) before the dispatcher's send has returned."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []
        self.applied_before_return = 0
        self.store: Store | None = None

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        await super().send_tasks(group, tasks)
        if group != "wf":
            return
        self.sent += [str(task["task_id"]) for task in tasks]
        await asyncio.sleep(0.3)
        assert self.store is not None
        run = await self.store.get_run(str(tasks[0]["run_id"]))
        if run is not None and run.awaiting_decision_task_id != tasks[0]["task_id"]:
            self.applied_before_return += 1


async def test_a_decision_applied_before_the_dispatchers_send_returned(store: Store) -> None:
    transport = SlowToReturn()
    transport.store = store
    async with fleet(store, transport) as (engine, _, _):
        await engine.start("fan", 3, run_id="early")
        done = await engine.wait_for_run("early", timeout=30)
        await asyncio.sleep(0.4)  # the last send returns after the run settled
        after = await engine.get_run("early")
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output == 2 * sum(range(6)) and calls["double"] == 6
    # Each turn's decision was applied while its send had not returned, and nothing the
    # dispatcher did on its late return touched the run: no turn was sent twice.
    assert transport.applied_before_return == len(transport.sent) >= 3
    assert len(set(transport.sent)) == len(transport.sent)
    assert after == done


async def test_a_signal_landing_while_a_turn_is_out_is_seen_by_the_next_turn(
    store: Store,
) -> None:
    async with fleet(store, remote_advance_silence=5.0) as (engine, _, _):
        await engine.start("patient", 0.6, run_id="p1")
        await until(lambda: _calls_of("slow"), "the worker is replaying the turn")
        await engine.signal("p1", "go", "while out")
        run = await engine.get_run("p1")
        assert run is not None and run.awaiting_decision_task_id is not None
        done = await engine.wait_for_run("p1", timeout=15)
    assert done.status == RunStatus.COMPLETED and done.output == "while out"
    assert calls["slow"] == 1  # the turn out was not superseded


async def _calls_of(name: str) -> int:
    return calls[name]


async def test_a_silent_turn_is_sent_again_under_a_fresh_task_id(store: Store) -> None:
    transport = InProcessTransport()
    async with fleet(store, transport, start_workers=False, remote_advance_silence=0.4) as (
        engine,
        crew,
        _,
    ):
        await engine.start("fails", None, run_id="s1")
        # A worker that takes the turn and dies with it: nothing comes back.
        lost = await until(lambda: transport.take_tasks("wf", 1, 0.05), "the turn went out")
        first = (await engine.get_run("s1")).awaiting_decision_task_id  # type: ignore[union-attr]
        assert first == lost[0]["task_id"]
        runner = asyncio.create_task(crew[0].run())
        done = await engine.wait_for_run("s1", timeout=15)
        await crew[0].stop()
        await runner
    assert done.status == RunStatus.FAILED and done.error is not None
    assert done.error["type"] == "ValueError" and calls["inc"] == 1


def _declared_with(name: str, **options: Any) -> list[Any]:
    """The declarations of every test workflow, ``name``'s with ``options``."""
    return [
        RemoteWorkflow(d, group="wf", **options) if d == name else RemoteWorkflow(d, group="wf")
        for d in NAMES
    ]


def _window_of(task: Message) -> float:
    from datetime import datetime

    sent = datetime.fromisoformat(str(task["dispatched_at"]))
    return (datetime.fromisoformat(str(task["expires_at"])) - sent).total_seconds()


@pytest.mark.parametrize(
    ("engine_silence", "turn_timeout"), [(None, 0.4), (0.4, 30.0), (30.0, 0.4)]
)
async def test_a_turn_is_sent_again_after_the_shorter_of_its_workflows_window_and_the_engines(
    store: Store, engine_silence: float | None, turn_timeout: float
) -> None:
    transport = InProcessTransport()
    declared = _declared_with("fails", turn_timeout=turn_timeout)
    async with fleet(
        store,
        transport,
        start_workers=False,
        declared=declared,
        remote_advance_silence=engine_silence,
    ) as (engine, crew, _):
        await engine.start("fails", None, run_id="s1")
        lost = await until(lambda: transport.take_tasks("wf", 1, 0.05), "the turn went out")
        assert _window_of(lost[0]) == pytest.approx(0.4)
        runner = asyncio.create_task(crew[0].run())
        # The engine's lease is 30 s: only a 0.4 s window sends the lost turn again this soon.
        done = await settled(engine, "s1", timeout=5)
        await crew[0].stop()
        await runner
    assert done.status == RunStatus.FAILED and done.error is not None
    assert done.error["type"] == "ValueError" and calls["inc"] == 1


def test_a_turn_timeout_must_be_a_positive_duration() -> None:
    from datetime import timedelta

    assert RemoteWorkflow("x", group="wf", turn_timeout=timedelta(seconds=2)).turn_timeout == 2.0
    for bad in (0, -1, float("nan"), "5", True):
        with pytest.raises(runlane.DefinitionError, match="turn_timeout"):
            RemoteWorkflow("x", group="wf", turn_timeout=bad)  # type: ignore[arg-type]


async def test_an_instance_that_did_not_send_the_turn_pushes_its_deadline_by_its_window(
    make_store: Callable[[], Store], store_kind: str
) -> None:
    # Only the listener hears the worker's beats; it did not send the turn, so it reads the
    # run's workflow to push the deadline by that workflow's 0.8 s, not the 30 s lease.
    transport = InProcessTransport()
    declared = _declared_with("patient", turn_timeout=0.8)
    shared = make_store()
    second = shared if store_kind == "memory" else make_store()
    listener = Engine(
        second, transport=transport, remote_workflows=declared, drive=False, consumers="always"
    )
    deadlines: list[float] = []
    async with fleet(shared, transport, declared=declared) as (engine, _, _):
        await _truncated(engine.store, store_kind)
        await engine._execution.remote.stop()  # type: ignore[union-attr]  # deaf to the beats
        async with listener:
            await engine.start("patient", 1.5, run_id="p1")
            await until(lambda: _calls_of("slow"), "the worker is replaying the turn")
            while len(deadlines) < 20:  # a second of the 1.5 s turn
                run = await engine.get_run("p1")
                assert run is not None and run.awaiting_decision_task_id is not None, run
                assert run.wake_at is not None
                deadlines.append((run.wake_at - engine.now()).total_seconds())
                await asyncio.sleep(0.05)
            await until(lambda: _waits_for_signal(engine, "p1"), "the long turn decided", 15)
            await engine.signal("p1", "go", 1)
            done = await settled(listener, "p1", timeout=15)
    assert done.status == RunStatus.COMPLETED and calls["slow"] == 1  # never sent again
    assert max(deadlines) <= 0.8 + 0.1, deadlines


async def test_a_beating_worker_is_never_re_driven(store: Store) -> None:
    async with fleet(store, remote_advance_silence=0.3) as (engine, _, _):
        await engine.start("patient", 1.2, run_id="b1")
        await until(lambda: _waits_for_signal(engine, "b1"), "the long turn decided", 15)
        await engine.signal("b1", "go", 1)
        done = await engine.wait_for_run("b1", timeout=15)
    assert done.status == RunStatus.COMPLETED and calls["slow"] == 1


class BeatLog(InProcessTransport):
    """Notes when each workflow heartbeat went out, by run."""

    def __init__(self) -> None:
        super().__init__()
        self.beats: dict[str, list[float]] = {}

    async def publish_heartbeat(self, beat: Message) -> None:
        if beat.get("kind") == "workflow":
            self.beats.setdefault(str(beat["run_id"]), []).append(time.monotonic())
        await super().publish_heartbeat(beat)


async def _blocking() -> bool:
    return block.began.is_set()


async def test_a_sync_heavy_body_holds_up_neither_its_workers_beats_nor_other_runs(
    store: Store,
) -> None:
    transport = BeatLog()
    async with fleet(store, transport, remote_advance_silence=0.5) as (engine, _, _):
        await engine.start("heavy", 2.4, run_id="h1")
        await until(_blocking, "the heavy body is blocking")
        await engine.start("patient", 0.2, run_id="p2")  # its step runs on the worker's loop
        await until(lambda: _waits_for_signal(engine, "p2"), "the other run's turn decided")
        other_decided = time.monotonic()
        done = await engine.wait_for_run("h1", timeout=15)
        steps = await engine.list_steps("h1")
    assert done.status == RunStatus.COMPLETED and done.output == 3, done.error
    assert [(s.seq, s.kind, s.status) for s in steps] == [
        (1, "step", "completed"),
        (2, "step", "completed"),
    ]
    assert other_decided < block.ended, "the other run's turn waited for the blocking body"
    # Beating on through the block, the turn was never sent again (the body ran once).
    assert calls["heavy"] == 1 and calls["inc"] == 2 and calls["slow"] == 1
    beats = transport.beats["h1"]
    gaps = [b - a for a, b in itertools.pairwise(beats) if b <= block.ended + 0.1]
    assert gaps and max(gaps) < 0.5, f"beats of the blocking turn {len(beats)}, gaps {gaps}"


async def test_a_body_replays_in_a_thread_and_its_local_steps_run_on_the_workers_loop(
    store: Store,
) -> None:
    async with fleet(store) as (engine, _, _):
        await engine.start("where", None, run_id="w1")
        done = await engine.wait_for_run("w1", timeout=15)
    assert done.status == RunStatus.COMPLETED, done.error
    seen = done.output
    assert seen["body"].startswith("runlane-replay"), seen
    assert seen["loop"] == id(asyncio.get_running_loop()), seen  # the worker's own loop
    assert not seen["sync"].startswith("runlane-replay"), seen  # the loop's executor


class CutOff(InProcessTransport):
    """The beats of the first workflow turn never get out: its worker is cut off from the
    engines, which send the turn again after the silence window."""

    def __init__(self) -> None:
        super().__init__()
        self.cut: str | None = None

    async def publish_heartbeat(self, beat: Message) -> None:
        if beat.get("kind") == "workflow":
            self.cut = self.cut or str(beat["task_id"])
            if beat["task_id"] == self.cut:
                raise ConnectionError("cut off from the engines")
        await super().publish_heartbeat(beat)


async def test_a_turn_cut_off_past_half_its_window_starts_no_further_step(store: Store) -> None:
    async with fleet(store, CutOff(), remote_advance_silence=0.6) as (engine, _, _):
        await engine.start("marks", None, run_id="m1")
        done = await engine.wait_for_run("m1", timeout=15)
        steps = await engine.list_steps("m1")
    assert done.status == RunStatus.COMPLETED and done.output == ["a", "b", "c"], done.error
    assert [(s.seq, s.status) for s in steps] == [(i, "completed") for i in (1, 2, 3)]
    # The first turn's step in flight ran again in the turn sent again; the first turn, its
    # beats lapsed, started nothing after it.
    assert (calls["a"], calls["b"], calls["c"]) == (2, 1, 1)


async def test_a_lapsed_turns_answer_still_awaited_keeps_what_it_ran(store: Store) -> None:
    # Half the window (0.8 s) passes without a beat while the first step runs (1 s); the turn
    # ends after it and is answered before the engine would send it again (1.6 s).
    async with fleet(store, CutOff(), remote_advance_silence=1.6) as (engine, _, _):
        await engine.start("marks", None, run_id="m2")
        done = await engine.wait_for_run("m2", timeout=15)
        steps = await engine.list_steps("m2")
    assert done.status == RunStatus.COMPLETED and done.output == ["a", "b", "c"], done.error
    assert [(s.seq, s.status) for s in steps] == [(i, "completed") for i in (1, 2, 3)]
    assert (calls["a"], calls["b"], calls["c"]) == (1, 1, 1)


async def test_a_run_cancelled_while_its_turn_is_out_drops_the_decision(store: Store) -> None:
    async with fleet(store) as (engine, _, _):
        await engine.start("patient", 0.5, run_id="c1")
        await until(lambda: _calls_of("slow"), "the worker is replaying the turn")
        await engine.cancel("c1")
        await asyncio.sleep(0.8)  # the decision comes back and finds nothing to apply
        run = await engine.get_run("c1")
    assert run is not None and run.status == RunStatus.CANCELLED
    assert await engine.list_steps("c1") == []


async def _dispatched(engine: Engine, run_id: str) -> bool:
    return any(s.name == "far.away" for s in await engine.list_steps(run_id))


async def test_a_run_cancelled_while_its_turn_waits_for_a_remote_step_ends_cancelled(
    store: Store,
) -> None:
    # The decision's remote step has a 30 s timeout and no worker takes it: the turn applying
    # the decision waits in memory. Cancelled then, the run used to stay cancelling until the
    # step ended (never, here: the task is only sent again after 300 s, then again and again).
    async with fleet(store) as (engine, _, _):
        await engine.start("stranded", 30.0, run_id="s1")
        await until(lambda: _waits_for_signal(engine, "s1"), "the run waits for its signal")
        await engine.signal("s1", "go", "now")
        await until(lambda: _dispatched(engine, "s1"), "the remote step was sent")
        assert await engine.cancel("s1") is True
        done = await settled(engine, "s1", timeout=5)
        [step] = [s for s in await engine.list_steps("s1") if s.name == "far.away"]
    assert (done.status, done.output) == (RunStatus.CANCELLED, None)
    assert step.status == "running"  # whatever a worker would say now is dropped


async def test_a_cancel_made_by_another_instance_ends_a_wait_for_a_remote_step(
    make_store: Callable[[], Store], store_kind: str
) -> None:
    shared = make_store()
    second = shared if store_kind == "memory" else make_store()
    other = Engine(second, transport=InProcessTransport(), drive=False, consumers="never")
    async with fleet(shared) as (engine, _, _), other:
        await _truncated(engine.store, store_kind)
        await engine.start("stranded", 1.0, run_id="s2")
        await until(lambda: _waits_for_signal(engine, "s2"), "the run waits for its signal")
        await engine.signal("s2", "go", "now")
        await until(lambda: _dispatched(engine, "s2"), "the remote step was sent")
        assert await other.cancel("s2") is True  # the waiting turn is not on this instance
        done = await settled(engine, "s2", timeout=5)  # noticed when its 1 s window runs out
    assert (done.status, done.output) == (RunStatus.CANCELLED, None)


async def test_a_remote_run_continues_as_new_and_starts_children_it_does_not_wait_for(
    store: Store,
) -> None:
    async with fleet(store) as (engine, _, _):
        await engine.start("counter", 0, run_id="k")
        first = await engine.wait_for_run("k", timeout=10)
        await until(lambda: engine.get_run("k~3.child.1"), "the last run started its child")
        last = await engine.wait_for_run("k~3", timeout=10)
        child_run = await engine.wait_for_run("k~3.child.1", timeout=10)
    assert first.status == RunStatus.COMPLETED and first.output == {"continued_as": "k~1"}
    assert last.output == {"n": 3, "started": "k~3.child.1"}
    assert child_run.status == RunStatus.COMPLETED and child_run.output == 4


async def test_a_workflow_the_worker_does_not_know_fails_the_run(store: Store) -> None:
    transport = InProcessTransport()
    engine = Engine(
        store,
        transport=transport,
        poll_interval=0.05,
        remote_workflows=[RemoteWorkflow("missing", group="wf")],
    )
    worker = Worker("wf", transport, workflows=WORKFLOWS, **FAST)
    runner = asyncio.create_task(worker.run())
    async with engine:
        await engine.start("missing", None, run_id="m1")
        done = await engine.wait_for_run("m1", timeout=10)
    await worker.stop()
    await runner
    assert done.status == RunStatus.FAILED and done.error is not None
    assert done.error["type"] == "UnknownWorkflowError"


@runlane.workflow(name="remote-alert")
async def remote_alert(ctx: runlane.Context, failure: dict[str, Any]) -> str:
    return f"{failure['workflow']} {failure['run_id']} {failure['status']}"


async def test_a_failed_remote_run_starts_the_on_failure_handler_its_declaration_names(
    store: Store,
) -> None:
    """The engine has no code of the remote workflow, only its declaration: the handler is
    started in the write that settles the failed run, as for a local workflow."""
    transport = InProcessTransport()
    engine = Engine(
        store,
        transport=transport,
        poll_interval=0.05,
        workflows=[remote_alert],
        remote_workflows=[RemoteWorkflow("fails", group="wf", on_failure="remote-alert")],
    )
    worker = Worker("wf", transport, workflows=WORKFLOWS, steps=[inc], **FAST)
    runner = asyncio.create_task(worker.run())
    async with engine:
        await engine.start("fails", None, run_id="f1")
        failed = await engine.wait_for_run("f1", timeout=10)
        handler = await engine.wait_for_run("f1.failure.1", timeout=10)
    await worker.stop()
    await runner
    assert failed.status == RunStatus.FAILED and failed.failures == 1
    assert failed.error is not None and failed.error["message"] == "no good"
    assert handler.status == RunStatus.COMPLETED
    assert handler.output == "fails f1 failed"
    assert handler.input["error"]["type"] == "ValueError"


async def test_a_decision_applied_by_another_instance_than_the_sender(
    make_store: Callable[[], Store], store_kind: str
) -> None:
    if store_kind == "memory":
        pytest.skip("two engines share a store through a database")
    transport = InProcessTransport()
    sender = Engine(
        make_store(), transport=transport, remote_workflows=DECLARED, poll_interval=0.05
    )
    applier = Engine(
        make_store(),
        transport=transport,
        remote_workflows=DECLARED,
        poll_interval=0.05,
        consumers="always",
        drive=False,
    )
    worker = Worker("wf", transport, workflows=WORKFLOWS, steps=[inc], **FAST)
    async with sender:
        await _truncated(sender.store, store_kind)
        await sender._execution.remote.stop()  # type: ignore[union-attr]  # decisions go to the applier
        async with applier:
            runner = asyncio.create_task(worker.run())
            await sender.start("child-wf", 1, run_id="x1")
            done = await applier.wait_for_run("x1", timeout=10)
            await worker.stop()
            await runner
    assert done.status == RunStatus.COMPLETED and done.output == 2


async def test_decisions_go_only_to_the_engines_that_declare_the_workflow(
    make_store: Callable[[], Store], store_kind: str
) -> None:
    """Two consuming engines share the store and the transport; only one declares the remote
    workflow. Every decision reaches it (none is taken, and lost, by the other), so a batch of
    runs completes at once, with no turn waiting out its silence window (the lease, 30 s)."""
    if store_kind == "memory":
        pytest.skip("two engines share a store through a database")
    transport = InProcessTransport()
    declares = Engine(make_store(), transport=transport, remote_workflows=DECLARED)
    other = Engine(make_store(), transport=transport, workflows=[], poll_interval=0.05)
    worker = Worker("wf", transport, workflows=WORKFLOWS, steps=[inc], **FAST)
    claimed: list[str] = []
    async with declares:
        await _truncated(declares.store, store_kind)
        async with other:
            claim_decision = other.store.claim_decision

            async def spy(run_id: str, *args: Any, **kwargs: Any) -> Any:
                claimed.append(run_id)
                return await claim_decision(run_id, *args, **kwargs)

            other.store.claim_decision = spy  # type: ignore[method-assign]
            runner = asyncio.create_task(worker.run())
            began = time.monotonic()
            ids = [f"d{i}" for i in range(20)]
            for run_id in ids:
                await declares.start("child-wf", 1, run_id=run_id)
            done = [await declares.wait_for_run(run_id, timeout=20) for run_id in ids]
            took = time.monotonic() - began
            await worker.stop()
            await runner
    assert [d.output for d in done] == [2] * 20
    assert claimed == []  # the other engine never saw a decision
    assert took < 10.0, f"a decision was lost: the batch took {took:.1f} s"


async def _truncated(store: Store, kind: str) -> None:
    reset = getattr(store, "reset_for_tests", None)
    if kind == "postgres" and reset is not None:
        await reset()


async def test_a_remote_workflow_over_the_db_transport(
    store: Store, store_kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    from runlane.transports import DbTransport

    prefix = f"rl-{uuid.uuid4().hex[:8]}"
    if store_kind == "postgres":
        transport = DbTransport(request.getfixturevalue("pg_url"), prefix=prefix)
    else:
        transport = DbTransport(f"sqlite:///{tmp_path / 'transport.db'}", prefix=prefix)
    try:
        async with fleet(store, transport) as (engine, _, _):
            await engine.start("fan", 3, run_id="d1")
            done = await settled(engine, "d1", timeout=20)
    finally:
        await transport.close()
    assert done.status == RunStatus.COMPLETED and done.output == 2 * sum(range(6))


async def test_a_step_naming_a_queue_fails_its_remote_run_rather_than_pass_the_queue(
    store: Store,
) -> None:
    """Step queues are not available to remote workflows yet: the engine dispatches a
    decision's steps without asking a queue, so a remote step naming one must not be sent."""
    async with fleet(store, queues=[StepQueue("slots", concurrency=1)]) as (engine, _, _):
        for local in (False, True):
            run = await engine.start("queued", local)
            done = await engine.wait_for_run(run.id, timeout=10)
            assert done.status == RunStatus.FAILED and done.error is not None, local
            assert "step queues are not available to remote workflows" in done.error["message"]
    assert calls["double"] == 0 and calls["inc"] == 0


class TaskLog(InProcessTransport):
    """Notes the groups every task went to."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[str] = []

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        self.groups += [group] * len(tasks)
        await super().send_tasks(group, tasks)


seen_by_step: list[Any] = []
stores: dict[str, Store] = {}


@runlane.step(name="wf.look")
async def look(run_id: str) -> str:
    run = await stores["engine"].get_run(run_id)
    seen_by_step.append(run)
    return "looked"


@runlane.workflow(name="looks", group="wf")
async def looks(ctx: runlane.Context, _: Any) -> str:
    await ctx.step(look, ctx.run_id)
    return str(await ctx.wait_for_signal("go"))


@contextlib.asynccontextmanager
async def deciding_here(store: Store) -> AsyncIterator[tuple[Engine, TaskLog]]:
    """An engine that has the workflows' code and decides their turns itself; only the math
    group's remote steps go to a worker."""
    transport = TaskLog()
    engine = Engine(
        store,
        transport=transport,
        workflows=[*WORKFLOWS, looks],
        steps=[*LOCAL_STEPS, look],
        poll_interval=0.05,
        in_process_turns=True,
    )
    stores["engine"] = store
    math = Worker("math", transport, steps=[double], **FAST)
    runner = asyncio.create_task(math.run())
    try:
        async with engine:
            yield engine, transport
    finally:
        await math.stop()
        await runner


async def test_an_engine_decides_a_remote_workflows_turns_in_process_under_its_lease(
    store: Store,
) -> None:
    seen_by_step.clear()
    async with deciding_here(store) as (engine, transport):
        await engine.start("tour", 3, run_id="t1")
        await engine.start("looks", None, run_id="l1")
        for run_id in ("t1", "l1"):
            await until(functools.partial(_waits_for_signal, engine, run_id), f"{run_id} waits")
            await engine.signal(run_id, "go", "yes")
        done = await settled(engine, "t1", timeout=15)
        looked = await settled(engine, "l1", timeout=15)
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output == {"a": 4, "b": 8, "said": "yes", "c": 9}
    assert looked.output == "yes"
    assert calls["inc"] == 2 and calls["double"] == 1
    assert set(transport.groups) == {"math"}, transport.groups  # no turn went to "wf"
    # The local step ran while the engine held the run's lease: no turn was out meanwhile.
    [during] = seen_by_step
    assert during.status == RunStatus.RUNNING and during.awaiting_decision_task_id is None
    assert during.lease_owner is not None and during.lease_owner.startswith(engine.id)


async def test_turns_decided_in_process_fail_continue_as_new_and_start_children(
    store: Store,
) -> None:
    async with deciding_here(store) as (engine, transport):
        await engine.start("fails", None, run_id="f1")
        await engine.start("counter", 0, run_id="k")
        failed = await settled(engine, "f1", timeout=15)
        await until(lambda: engine.get_run("k~3.child.1"), "the last run started its child")
        last = await settled(engine, "k~3", timeout=15)
        child_run = await settled(engine, "k~3.child.1", timeout=15)
    assert failed.status == RunStatus.FAILED and failed.error is not None
    assert failed.error["type"] == "ValueError" and failed.error["message"] == "no good"
    assert last.output == {"n": 3, "started": "k~3.child.1"} and child_run.output == 4
    assert transport.groups == []


@runlane.step(name="wf.freeze")
async def freeze(seconds: float) -> str:
    calls.hit("freeze")
    frozen["clock"].advance(seconds)  # the engine "freezes" past its lease in this step
    return "thawed"


@runlane.step(name="wf.after")
async def after_freeze() -> str:
    calls.hit("after")
    return "after"


@runlane.workflow(name="freezes", group="wf")
async def freezes(ctx: runlane.Context, seconds: float) -> list[str]:
    return [str(await ctx.step(freeze, seconds)), str(await ctx.step(after_freeze))]


frozen: dict[str, Any] = {}


async def test_a_turn_decided_in_process_starts_no_step_once_its_lease_ran_out(
    make_engine: Callable[..., Any], clock: Any
) -> None:
    frozen["clock"] = clock
    engine = await make_engine(
        freezes,
        steps=[freeze, after_freeze],
        transport=InProcessTransport(),
        in_process_turns=True,
        lease=30.0,
    )
    await engine.start(freezes, 31.0, run_id="fz")
    await engine.tick()
    # The first step outlasted the lease: the turn ended after it, due again at once.
    assert (calls["freeze"], calls["after"]) == (1, 0)
    [step] = await engine.list_steps("fz")
    assert (step.name, step.status) == ("wf.freeze", "completed")
    run = await settle(engine, "fz")
    assert (run.status, run.output) == (RunStatus.COMPLETED, ["thawed", "after"])
    assert (calls["freeze"], calls["after"]) == (1, 1)


async def test_a_remote_workflows_declared_singleton_and_quota_gate_its_starts(
    store: Store,
) -> None:
    gated = _declared_with(
        "patient",
        singleton=runlane.Singleton(key=lambda i: "one-patient"),
        concurrency=runlane.Concurrency(key="patients", limit=2),
    )
    async with fleet(store, declared=gated) as (engine, _, _):
        await engine.start("patient", 0.0, run_id="p1")
        await until(lambda: _waits_for_signal(engine, "p1"), "the holder waits for its signal")
        await engine.start("patient", 0.0, run_id="p2")
        with pytest.raises(runlane.ConcurrencyLimitError) as refused:
            await engine.start("patient", 0.0, run_id="p3")
        assert (refused.value.key, refused.value.active) == ("patients", 2)
        assert await engine.get_run("p3") is None
        holder, waiter = [await engine.get_run(i) for i in ("p1", "p2")]
        assert holder is not None and waiter is not None
        assert holder.holds_slot and (waiter.status, waiter.holds_slot) == (
            RunStatus.BLOCKED,
            False,
        )
        assert calls["slow"] == 1  # the waiter's body never ran on the worker
        await engine.signal("p1", "go", 1)
        await engine.signal("p2", "go", 2)  # buffered until its turn
        first = await settled(engine, "p1", timeout=15)
        second = await settled(engine, "p2", timeout=15)
    assert (first.output, second.output) == (1, 2)
    assert calls["slow"] == 2


def test_a_remote_workflow_needs_a_transport() -> None:
    with pytest.raises(runlane.DefinitionError, match="transport"):
        Engine("memory://", remote_workflows=[RemoteWorkflow("x", group="wf")])


def test_remote_workflow_declarations_are_checked() -> None:
    with pytest.raises(runlane.DefinitionError):
        RemoteWorkflow("x", group="")
    with pytest.raises(runlane.DefinitionError):
        runlane.workflow(name="y", group="")(
            tour.__wrapped__ if hasattr(tour, "__wrapped__") else _body
        )


async def _body(ctx: runlane.Context, input: Any) -> None:
    return None
