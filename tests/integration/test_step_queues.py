"""Step queues on every store, with the ManualClock: concurrency never exceeded, fixed rate
windows, priority, fairness across keys, LIFO, a freed slot waking the next waiter without any
timer, slots released on cancel and on recovery, remote steps, and an unregistered queue."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

import runlane
from runlane import DefinitionError, Engine, RateLimit, RunStatus, StepQueue
from runlane.models import RetryTimer, StepKind, StepRecord, StepStatus, Writes
from runlane.step_queues import QueueRequest
from runlane.testing import ManualClock

from ..helpers import settle


class Slots:
    """Steps that hold their slot until told to go; what ran, in which order, how many at once."""

    def __init__(self) -> None:
        self.inside: set[str] = set()
        self.peak = 0
        self.order: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.entered = asyncio.Event()

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    async def enter(self, name: str, hold: bool) -> None:
        self.inside.add(name)
        self.peak = max(self.peak, len(self.inside))
        self.order.append(name)
        self.entered.set()
        try:
            if hold:
                await self.gate(name).wait()
        finally:
            self.inside.discard(name)


slots = Slots()


@pytest.fixture(autouse=True)
def fresh_slots() -> None:
    global slots
    slots = Slots()


@runlane.step(name="queues.work", queue="slots")
async def work(i: dict[str, Any]) -> str:
    await slots.enter(i["name"], bool(i.get("hold")))
    return str(i["name"])


@runlane.workflow(name="queues.one")
async def one(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.step(work, i, priority=i.get("priority", 0), fairness_key=i.get("key"))


@runlane.workflow(name="queues.elsewhere")
async def elsewhere(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.step(work, i, queue=i["queue"])


@runlane.workflow(name="queues.fan")
async def fan(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    names = [f"{i['name']}.{n}" for n in range(i["n"])]
    return await ctx.all([ctx.step(work, {"name": name}) for name in names])


WORKFLOWS = [one, elsewhere, fan]


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def statuses(engine: Engine, run_ids: list[str]) -> list[RunStatus]:
    runs = [await engine.get_run(run_id) for run_id in run_ids]
    return [r.status for r in runs if r is not None]


async def waiting(engine: Engine, run_ids: list[str]) -> None:
    """Until every one of these runs asked its queue and was told to wait."""

    async def parked() -> bool:
        # A run waiting for admission is ``blocked``, not ``suspended`` like one waiting for time.
        return all(s == RunStatus.BLOCKED for s in await statuses(engine, run_ids))

    await until(parked, f"{run_ids} to wait for the queue")


async def settled(engine: Engine, run_ids: list[str], timeout: float = 10) -> list[runlane.Run]:
    runs = [await engine.wait_for_run(run_id, timeout=timeout) for run_id in run_ids]
    return runs


async def driving(make_engine: Any, *queues: StepQueue, **kwargs: Any) -> Engine:
    engine: Engine = await make_engine(*WORKFLOWS, drive=True, queues=list(queues), **kwargs)
    await engine.__aenter__()
    return engine


# ---------------------------------------------------------------- definitions


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"name": ""}, "name must be"),
        ({"concurrency": 0}, "concurrency must be"),
        ({"concurrency": True}, "concurrency must be"),
        ({"rate_limit": SimpleNamespace(limit=2, period=1)}, "rate_limit must be a RateLimit"),
        ({"rate_limit": 5}, "rate_limit must be a RateLimit"),
        ({"rate_limit": RateLimit(2, 1, key=lambda i: i["t"])}, "has no key"),
        ({"rate_limit": RateLimit(2, 1, on_limit="delay")}, "on_limit does not apply"),
        ({"fairness": "round-robin"}, "fairness"),
        ({"order": "random"}, "order"),
    ],
)
def test_a_bad_queue_is_refused_at_definition(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(DefinitionError, match=problem):
        StepQueue(**{"name": "q", **options})


def test_bad_step_options_are_refused() -> None:
    with pytest.raises(DefinitionError, match="queue="):
        runlane.step(name="bad", queue="")(lambda i: i)
    with pytest.raises(DefinitionError, match="queues= takes StepQueue"):
        Engine("memory://", queues=["slots"])  # type: ignore[list-item]
    with pytest.raises(DefinitionError, match="registered twice"):
        Engine("memory://", queues=[StepQueue("q", concurrency=1), StepQueue("q", concurrency=2)])


async def test_priority_must_be_an_int(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS, queues=[StepQueue("slots", concurrency=1)])
    run = await engine.start(one, {"name": "a", "priority": "high"})
    done = await settle(engine, run.id)
    assert done.status == RunStatus.FAILED
    assert done.error is not None and "priority must be an int" in done.error["message"]


# ---------------------------------------------------------------- concurrency


async def test_concurrency_is_never_exceeded_and_a_freed_slot_wakes_the_next(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await driving(make_engine, StepQueue("slots", concurrency=2))
    runs = [await engine.start(one, {"name": f"r{n}", "hold": True}) for n in range(6)]
    ids = [r.id for r in runs]
    await until(lambda: _true(len(slots.inside) == 2), "two steps inside")
    inside = {r.id for r in runs if r.input["name"] in slots.inside}
    await waiting(engine, [i for i in ids if i not in inside])
    # The clock never moves: every admission after the first two comes from a freed slot's wake.
    by_name = {r.input["name"]: r.id for r in runs}
    for left in range(6, 0, -1):

        async def full(left: int = left) -> bool:
            return len(slots.inside) == min(2, left)

        await until(full, "a full queue")
        name = sorted(slots.inside)[0]
        slots.gate(name).set()
        await engine.wait_for_run(by_name[name], timeout=10)
    assert slots.peak == 2
    assert sorted(slots.order) == [f"r{n}" for n in range(6)]
    assert sorted(r.output for r in await settled(engine, ids)) == [f"r{n}" for n in range(6)]


async def _true(value: bool) -> bool:
    return value


async def test_steps_of_one_run_share_the_queue(make_engine: Any) -> None:
    engine = await driving(make_engine, StepQueue("slots", concurrency=3))
    run = await engine.start(fan, {"name": "f", "n": 10})
    done = await engine.wait_for_run(run.id, timeout=10)
    assert done.status == RunStatus.COMPLETED
    assert sorted(done.output) == sorted(f"f.{n}" for n in range(10))
    assert slots.peak <= 3


async def test_queues_are_exact_across_engines(make_engine: Any) -> None:
    queue = StepQueue("slots", concurrency=1)
    first = await driving(make_engine, queue)
    second = await driving(make_engine, queue)
    a = await first.start(one, {"name": "a", "hold": True})
    await until(lambda: _true("a" in slots.inside), "a inside")
    b = await second.start(one, {"name": "b", "hold": True})
    await waiting(second, [b.id])
    assert slots.inside == {"a"}
    slots.gate("a").set()
    await until(lambda: _true("b" in slots.inside), "b admitted after a")
    slots.gate("b").set()
    assert (await second.wait_for_run(b.id, timeout=10)).status == RunStatus.COMPLETED
    assert (await first.wait_for_run(a.id, timeout=10)).status == RunStatus.COMPLETED
    assert slots.peak == 1


async def test_the_store_keeps_the_last_registered_settings(make_engine: Any) -> None:
    """Engines agree on a queue's numbers: the last registration is what everyone enforces."""
    first = await driving(make_engine, StepQueue("slots", concurrency=3))
    await driving(make_engine, StepQueue("slots", concurrency=1))
    runs = [await first.start(one, {"name": f"r{n}", "hold": True}) for n in range(3)]
    await until(lambda: _true(len(slots.inside) == 1), "one step inside")
    await waiting(first, [r.id for r in runs if r.id != _inside_run(runs)])
    assert len(slots.inside) == 1
    for n in range(3):
        slots.gate(f"r{n}").set()
    await settled(first, [r.id for r in runs])
    assert slots.peak == 1


def _inside_run(runs: list[runlane.Run]) -> str:
    [name] = slots.inside
    return next(r.id for r in runs if r.input["name"] == name)


# ---------------------------------------------------------------- order among waiters


async def _line_up(
    engine: Engine, inputs: list[dict[str, Any]], holder_key: str | None = None
) -> list[str]:
    """Hold the only slot (served as ``holder_key``), line the inputs up behind it (in this
    order), then let go."""
    first = {"name": "holder", "hold": True, "priority": 100, "key": holder_key}
    holder = await engine.start(one, first)
    await until(lambda: _true("holder" in slots.inside), "the holder inside")
    ids = []
    for i in inputs:
        run = await engine.start(one, i)
        await waiting(engine, [run.id])
        ids.append(run.id)
    slots.gate("holder").set()
    await settled(engine, [holder.id, *ids])
    return slots.order[1:]


async def test_higher_priority_goes_first(make_engine: Any) -> None:
    engine = await driving(make_engine, StepQueue("slots", concurrency=1))
    order = await _line_up(
        engine,
        [
            {"name": "low", "priority": 0},
            {"name": "high", "priority": 5},
            {"name": "mid", "priority": 2},
            {"name": "high2", "priority": 5},
        ],
    )
    assert order == ["high", "high2", "mid", "low"]


async def test_fairness_serves_the_key_served_least_recently(make_engine: Any) -> None:
    engine = await driving(make_engine, StepQueue("slots", concurrency=1, fairness="key"))
    inputs = [{"name": f"a{n}", "key": "tenant-a"} for n in range(3)]
    inputs += [{"name": f"b{n}", "key": "tenant-b"} for n in range(2)]
    order = await _line_up(engine, inputs)
    assert order == ["a0", "b0", "a1", "b1", "a2"]


async def test_priority_outranks_fairness(make_engine: Any) -> None:
    engine = await driving(make_engine, StepQueue("slots", concurrency=1, fairness="key"))
    # tenant-a was served last (the holder), tenant-b never: only the priority puts a0 first.
    inputs: list[dict[str, Any]] = [
        {"name": "b0", "key": "tenant-b"},
        {"name": "a0", "key": "tenant-a", "priority": 1},
    ]
    assert await _line_up(engine, inputs, holder_key="tenant-a") == ["a0", "b0"]


async def test_without_fairness_arrival_decides(make_engine: Any) -> None:
    engine = await driving(make_engine, StepQueue("slots", concurrency=1))
    inputs = [{"name": f"a{n}", "key": "tenant-a"} for n in range(3)]
    inputs += [{"name": f"b{n}", "key": "tenant-b"} for n in range(2)]
    assert await _line_up(engine, inputs) == ["a0", "a1", "a2", "b0", "b1"]


async def test_lifo_serves_the_newest_first(make_engine: Any) -> None:
    engine = await driving(make_engine, StepQueue("slots", concurrency=1, order="lifo"))
    order = await _line_up(engine, [{"name": f"r{n}"} for n in range(4)])
    assert order == ["r3", "r2", "r1", "r0"]


# ---------------------------------------------------------------- rate limits


async def test_rate_limit_admits_per_fixed_window(make_engine: Any, clock: ManualClock) -> None:
    clock.set(clock.now().replace(second=10))  # 10 s into a 60 s window
    rate = RateLimit(limit=2, period=60)
    engine = await make_engine(*WORKFLOWS, queues=[StepQueue("slots", rate_limit=rate)])
    runs = [await engine.start(one, {"name": f"r{n}"}) for n in range(5)]
    ids = [r.id for r in runs]
    await engine.tick()
    now = await statuses(engine, ids)
    assert sorted(now) == [RunStatus.BLOCKED] * 3 + [RunStatus.COMPLETED] * 2
    waiters = [await engine.get_run(i) for i, s in zip(ids, now, strict=True) if s != "completed"]
    window_end = clock.now().replace(second=0) + timedelta(seconds=60)
    assert {w.wake_at for w in waiters if w is not None} == {window_end}
    clock.advance(49.9)  # not yet
    await engine.tick()
    assert (await statuses(engine, ids)).count(RunStatus.COMPLETED) == 2
    clock.set(window_end)
    await engine.tick()
    await engine.tick()
    assert (await statuses(engine, ids)).count(RunStatus.COMPLETED) == 4
    clock.advance(60)
    for run_id in ids:
        await settle(engine, run_id)
    started = []
    for run_id in ids:
        started += [s.started_at for s in await engine.list_steps(run_id) if s.started_at]
    per_window: dict[int, int] = {}
    for at in started:
        bucket = int(at.timestamp() // 60)
        per_window[bucket] = per_window.get(bucket, 0) + 1
    assert sorted(per_window.values()) == [1, 2, 2]


async def test_rate_and_concurrency_both_hold(make_engine: Any, clock: ManualClock) -> None:
    rate = RateLimit(limit=3, period=timedelta(minutes=1))
    engine = await driving(make_engine, StepQueue("slots", concurrency=1, rate_limit=rate))
    runs = [await engine.start(one, {"name": f"r{n}"}) for n in range(4)]
    await until(lambda: _true(len(slots.order) == 3), "three admissions (the window's)", timeout=10)
    await asyncio.sleep(0.2)
    assert len(slots.order) == 3 and slots.peak == 1
    clock.advance(60)
    await engine.tick()
    await settled(engine, [r.id for r in runs])
    assert slots.peak == 1


# ---------------------------------------------------------------- releases


async def test_cancelling_a_waiter_or_a_holder_frees_its_place(make_engine: Any) -> None:
    engine = await driving(make_engine, StepQueue("slots", concurrency=1))
    holder = await engine.start(one, {"name": "holder", "hold": True})
    await until(lambda: _true("holder" in slots.inside), "the holder inside")
    doomed = await engine.start(one, {"name": "doomed"})
    after = await engine.start(one, {"name": "after"})
    await waiting(engine, [doomed.id, after.id])
    await engine.cancel(doomed.id)
    await engine.cancel(holder.id)  # cancelling: its slot goes when its turn settles it
    slots.gate("holder").set()
    assert (await engine.wait_for_run(holder.id, timeout=10)).status == RunStatus.CANCELLED
    assert (await engine.wait_for_run(after.id, timeout=10)).status == RunStatus.COMPLETED
    assert (await engine.get_run(doomed.id)).status == RunStatus.CANCELLED  # type: ignore[union-attr]
    assert "doomed" not in slots.order


@runlane.workflow(name="queues.keyed", singleton=runlane.Singleton(key=lambda i: "one-export"))
async def keyed(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.step(work, i)


async def test_a_singleton_holder_blocked_on_a_step_queue_keeps_its_singleton_slot(
    make_engine: Any,
) -> None:
    engine = await make_engine(
        *WORKFLOWS, keyed, drive=True, queues=[StepQueue("slots", concurrency=1)]
    )
    await engine.__aenter__()
    other = await engine.start(one, {"name": "other", "hold": True})
    await until(lambda: _true("other" in slots.inside), "the other run holds the queue")
    holder = await engine.start(keyed, {"name": "holder"})
    await waiting(engine, [holder.id])  # blocked on the step queue
    waiter = await engine.start(keyed, {"name": "waiter"})
    await waiting(engine, [waiter.id])  # blocked behind the singleton holder
    held, queued = [await engine.get_run(i) for i in (holder.id, waiter.id)]
    assert held is not None and queued is not None
    assert held.holds_slot and not queued.holds_slot
    assert [s.kind for s in await engine.list_steps(waiter.id)] == []  # never admitted
    slots.gate("other").set()
    done = await settled(engine, [other.id, holder.id, waiter.id])
    assert [r.status for r in done] == [RunStatus.COMPLETED] * 3
    assert slots.order == ["other", "holder", "waiter"] and slots.peak == 1


async def test_a_recovered_run_gives_back_the_slot_its_lost_turn_held(
    make_engine: Any, clock: ManualClock
) -> None:
    """A turn that dies holding a slot leaks nothing: recovering its run frees the slot for the
    waiter in line, and the recovered run's replay asks again behind that waiter."""
    engine = await make_engine(*WORKFLOWS, lease=5, queues=[StepQueue("slots", concurrency=1)])
    holder = await engine.start(one, {"name": "holder"})
    # Another instance's turn claims the holder, is admitted to the only slot, and dies.
    now, store = clock.now(), engine.store
    no_wait = RetryTimer(0.0, 0.0)
    lease_end = now + timedelta(seconds=5)
    await store.claim_run(holder.id, "dead:1", now, lease_end, singleton_retry=no_wait)
    request = QueueRequest("slots", 1, 0, holder.id)
    assert (await store.admit_step(holder.id, "dead:1", Writes(), request, now, no_wait)).admitted
    waiter = await engine.start(one, {"name": "waiter"})
    await engine.tick()
    assert (await engine.get_run(waiter.id)).status == RunStatus.BLOCKED
    assert slots.order == []
    clock.advance(6)  # the dead turn's lease has expired
    assert await engine.recover_incomplete() == 1
    for run in (waiter, holder):
        assert (await settle(engine, run.id)).status == RunStatus.COMPLETED
    assert slots.order == ["waiter", "holder"]
    assert [s.seq for s in await engine.list_steps(holder.id)] == [1]  # the seq it held


async def test_a_failed_attempt_frees_its_slot_while_its_retry_waits(
    make_engine: Any, clock: ManualClock
) -> None:
    calls = {"n": 0}

    @runlane.step(
        name="queues.flaky",
        queue="slots",
        retry=runlane.Retry(max_attempts=2, backoff=60, jitter=0),
    )
    async def flaky(i: Any) -> str:
        calls["n"] += 1
        raise ValueError("boom")

    @runlane.workflow(name="queues.flaky-run")
    async def flaky_run(ctx: runlane.Context, i: Any) -> Any:
        return await ctx.step(flaky, i)

    engine = await make_engine(
        *WORKFLOWS, flaky_run, steps=[flaky], queues=[StepQueue("slots", concurrency=1)]
    )
    failed = await engine.start(flaky_run, None)
    await engine.tick()
    backing_off = await engine.get_run(failed.id)
    assert backing_off is not None and backing_off.status == RunStatus.SUSPENDED
    assert calls["n"] == 1
    # The recorded attempt gave the slot back: another step is admitted during the backoff.
    then = await engine.start(one, {"name": "then"})
    assert (await settle(engine, then.id)).output == "then"
    clock.advance(60)
    done = await settle(engine, failed.id)
    assert done.status == RunStatus.FAILED and calls["n"] == 2


async def test_an_unregistered_queue_fails_the_run(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS, queues=[StepQueue("slots")])
    run = await engine.start(elsewhere, {"name": "x", "queue": "nowhere"})
    done = await settle(engine, run.id)
    assert done.status == RunStatus.FAILED
    assert done.error is not None and done.error["type"] == "DefinitionError"
    assert "'nowhere' is not registered" in done.error["message"]
    assert slots.order == []


async def test_a_queue_registered_by_another_engine_is_enforced(make_engine: Any) -> None:
    registrar = await make_engine(*WORKFLOWS, queues=[StepQueue("slots", concurrency=1)])
    await registrar.tick()  # opens the store: the queue is registered
    bare = await driving(make_engine)  # registers no queue of its own
    runs = [await bare.start(one, {"name": f"r{n}", "hold": True}) for n in range(2)]
    await until(lambda: _true(len(slots.inside) == 1), "one step inside")
    await waiting(bare, [_waiting_run(runs)])
    assert len(slots.inside) == 1
    for n in range(2):
        slots.gate(f"r{n}").set()
    assert [r.output for r in await settled(bare, [r.id for r in runs])] == ["r0", "r1"]
    assert slots.peak == 1


def _waiting_run(runs: list[runlane.Run]) -> str:
    return next(r.id for r in runs if r.id != _inside_run(runs))


async def test_unqueued_steps_never_touch_queues(make_engine: Any) -> None:
    @runlane.step(name="queues.plain")
    async def plain(i: Any) -> Any:
        return i

    @runlane.workflow(name="queues.plain-run")
    async def plain_run(ctx: runlane.Context, i: Any) -> Any:
        return await ctx.step(plain, i)

    engine = await make_engine(plain_run, steps=[plain])
    run = await engine.start(plain_run, 7)
    done = await settle(engine, run.id)
    assert done.output == 7 and not done.queued


# ---------------------------------------------------------------- remote steps


@runlane.step(name="queues.remote", group="qworkers", queue="slots")
async def remote_work(i: dict[str, Any]) -> str:
    await slots.enter(i["name"], False)
    await asyncio.sleep(0.02)  # long enough for a second admission to show if one slipped in
    return str(i["name"])


@runlane.workflow(name="queues.remote-run")
async def remote_run(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.step(remote_work, i)


async def test_remote_steps_hold_their_slot_until_the_result_is_recorded(
    make_engine: Any,
) -> None:
    from runlane.transports import InProcessTransport

    transport = InProcessTransport()
    engine = await make_engine(
        remote_run, drive=True, transport=transport, queues=[StepQueue("slots", concurrency=1)]
    )
    await engine.__aenter__()
    worker = runlane.Worker(
        "qworkers", transport, steps=[remote_work], concurrency=4, poll_timeout=0.05
    )
    working = asyncio.create_task(worker.run())
    try:
        runs = [await engine.start(remote_run, {"name": f"r{n}"}) for n in range(5)]
        finished = await settled(engine, [r.id for r in runs])
        assert [r.status for r in finished] == [RunStatus.COMPLETED] * 5
        assert sorted(slots.order) == [f"r{n}" for n in range(5)]
        assert slots.peak == 1  # the worker could take 4 at once; the queue allowed one
    finally:
        await worker.stop()
        await working


async def test_a_recovered_run_keeps_the_slot_of_a_remote_attempt_in_flight(
    make_engine: Any, clock: ManualClock
) -> None:
    """A remote attempt sent before its turn was lost may still be running on a worker: the
    recovery of its run keeps its slot (a lost turn's other slots go) until its result is
    recorded, or the queue would admit a step beside it past its concurrency."""
    from runlane.transports import InProcessTransport

    engine = await make_engine(
        *WORKFLOWS,
        remote_run,
        lease=5,
        transport=InProcessTransport(),
        queues=[StepQueue("slots", concurrency=1)],
    )
    holder = await engine.start(remote_run, {"name": "holder"})
    # Another instance's turn claims the holder, is admitted, sends the attempt, and dies.
    now, store = clock.now(), engine.store
    no_wait = RetryTimer(0.0, 0.0)
    await store.claim_run(
        holder.id, "dead:1", now, now + timedelta(seconds=5), singleton_retry=no_wait
    )
    request = QueueRequest("slots", 1, 0, holder.id)
    sent = StepRecord(
        run_id=holder.id,
        seq=1,
        name="queues.remote",
        kind=StepKind.STEP,
        status=StepStatus.RUNNING,
        input={"name": "holder"},
        attempts=1,
        started_at=now,
        wake_at=now + timedelta(seconds=60),
        dispatches=1,
    )
    ask = await store.admit_step(holder.id, "dead:1", Writes((sent,)), request, now, no_wait)
    assert ask.admitted
    waiter = await engine.start(one, {"name": "waiter"})
    await engine.tick()
    clock.advance(6)  # the dead turn's lease has expired
    assert await engine.recover_incomplete() == 1
    await engine.tick()
    assert (await engine.get_run(waiter.id)).status == RunStatus.BLOCKED
    [view] = await store.queue_views()
    assert [(e.run_id, e.seq) for e in view.holders()] == [(holder.id, 1)]
    # The worker's result frees the slot, and the waiter is woken for it.
    assert await store.record_step_result(holder.id, 1, 1, True, "holder", None, clock.now())
    for run in (holder, waiter):
        assert (await settle(engine, run.id)).status == RunStatus.COMPLETED
    assert slots.order == ["waiter"]  # the holder's step ran on the dead instance's worker


async def test_an_engine_without_queues_hands_a_slot_its_remote_result_frees_on_at_once(
    make_engine: Any,
) -> None:
    """The queue is registered by another engine; the one that records the result still hands
    the freed slot on at once (its poll is 30 s away, the waiter's fallback timer further)."""
    from runlane.transports import InProcessTransport

    registrar = await make_engine(remote_run, queues=[StepQueue("slots", concurrency=1)])
    await registrar.tick()  # opens the store: the queue is registered
    transport = InProcessTransport()
    engine = await make_engine(remote_run, drive=True, transport=transport, poll_interval=30)
    await engine.__aenter__()
    worker = runlane.Worker("qworkers", transport, steps=[remote_work], poll_timeout=0.05)
    working = asyncio.create_task(worker.run())
    try:
        runs = [await engine.start(remote_run, {"name": f"r{n}"}) for n in range(3)]
        finished = await settled(engine, [r.id for r in runs], timeout=5)
        assert [r.status for r in finished] == [RunStatus.COMPLETED] * 3
        assert slots.peak == 1
    finally:
        await worker.stop()
        await working
