"""Remote workflow turns on every store: the engine sends turns, in-process Workers decide them.

The engines here have no workflow code (``RemoteWorkflow`` only); the bodies live on the
workers. Real clock, short windows; every wait is bounded and reports what it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from tests.helpers import Calls, settled

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


@runlane.workflow(name="patching", group="wf")
async def patching(ctx: runlane.Context, x: int) -> int:
    if ctx.patched("double-it"):
        x = int(await ctx.step(double, x))
    await ctx.sleep(0.01)
    ctx.deprecate_patch("nothing-here")
    return x


@runlane.workflow(name="attributed", group="wf")
async def attributed(ctx: runlane.Context, customer: str) -> int:
    ctx.set_attributes({"customer": customer, "stage": "doubling"})
    x = int(await ctx.step(double, 2))  # the worker's decision carries the record
    await ctx.set_attributes({"stage": "sleeping", "x": x})
    await ctx.sleep(0.01)
    ctx.set_attributes({"stage": "done"})
    return x


WORKFLOWS = [
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
    attributed,
]
NAMES = (
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
    **options: Any,
) -> AsyncIterator[tuple[Engine, list[Worker], Transport]]:
    transport = transport or InProcessTransport()
    options.setdefault("poll_interval", 0.05)
    engine = Engine(store, transport=transport, remote_workflows=DECLARED, **options)
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
