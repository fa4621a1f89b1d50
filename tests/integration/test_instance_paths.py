"""One instance's dealings with a real run queue (Redis, and the db transport on PostgreSQL):
consumers turned on later, the prefetch and local bounds, the hand-back on drain, and an
enqueue that fails.

Every engine here is ``drive=False``: it has no poll loop, so whatever it executes came to it
through the run queue (or a poll phase the test calls), never through a poll of its own.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import pytest

import runlane
from runlane import Engine, Run, RunStatus
from runlane import run_queue as run_queue_module
from runlane.remote.worker import Worker
from runlane.stores import open_store
from runlane.transports.base import Transport

from ..queues import QUEUE_KINDS, purge, queue_transport, reset_postgres

executed: list[str] = []  # "<instance>:<run id>", once per execution of the step
occupancy: Counter[str] = Counter()  # per instance, turns inside the held step right now
peak: Counter[str] = Counter()
# Fresh per test: an asyncio.Event binds to the first event loop that waits on it.
events: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def fresh_state() -> None:
    flaky_failures.clear()
    executed.clear()
    occupancy.clear()
    peak.clear()
    events["gate"] = asyncio.Event()


def where_on(instance: str) -> Any:
    """The step ``instances.where`` as one instance registers it: it says where it ran."""

    @runlane.step(name="instances.where")
    async def where(arg: dict[str, Any]) -> str:
        executed.append(f"{instance}:{arg['run']}")
        if arg.get("hold"):
            occupancy[instance] += 1
            peak[instance] = max(peak[instance], occupancy[instance])
            await events["gate"].wait()
            occupancy[instance] -= 1
        return instance

    return where


@runlane.step(name="instances.charge", group="instances")
async def charge(amount: int) -> int:
    return amount


@runlane.workflow(name="instances.checkout")
async def checkout(ctx: runlane.Context, amount: int) -> Any:
    where = await ctx.step("instances.where", {"run": ctx.run_id})
    return {"where": where, "charged": await ctx.step(charge, amount)}


@runlane.workflow(name="instances.held")
async def held(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.step("instances.where", {"run": ctx.run_id, "hold": True})


@runlane.workflow(name="instances.kid")
async def kid(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("kid-go")


@runlane.workflow(name="instances.parent")
async def parent(ctx: runlane.Context, _: Any) -> Any:
    await ctx.start_child(kid, None, run_id=f"{ctx.run_id}.kid")
    await ctx.wait_for_signal("parent-go")
    await ctx.step("instances.where", {"run": ctx.run_id, "hold": True})
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="instances.visit")
async def visit(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.step("instances.where", {"run": ctx.run_id})


@runlane.workflow(name="instances.fails", on_failure="instances.visit")
async def fails(ctx: runlane.Context, _: Any) -> Any:
    await ctx.step("instances.where", {"run": ctx.run_id})
    raise ValueError("failed for its handler")


@runlane.workflow(name="instances.spawns")
async def spawns(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.child(visit, None, run_id=f"{ctx.run_id}.child")


@runlane.workflow(name="instances.continues")
async def continues(ctx: runlane.Context, n: int) -> Any:
    if n == 0:
        ctx.continue_as_new(1)
    return await ctx.step("instances.where", {"run": ctx.run_id})


flaky_failures: list[str] = []


@runlane.step(name="instances.flaky")
async def flaky(run_id: str) -> str:
    if run_id not in flaky_failures:
        flaky_failures.append(run_id)
        raise RuntimeError("down the first time")
    return "up"


@runlane.workflow(name="instances.retried")
async def retried(ctx: runlane.Context, _: Any) -> Any:
    await ctx.step("instances.where", {"run": ctx.run_id})
    return await ctx.step(flaky, ctx.run_id)


@runlane.workflow(name="instances.on-signup", on_event=("instances.signed-up",))
async def on_signup(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.step("instances.where", {"run": ctx.run_id})


WORKFLOWS = [checkout, held, kid, parent, visit, fails, spawns, continues, retried, on_signup]


@pytest.fixture(params=QUEUE_KINDS)
def transport_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


redis_only = pytest.mark.parametrize("transport_kind", ["redis"])


@pytest.fixture
async def instance(transport_kind: str, pg_url: str) -> AsyncIterator[Any]:
    """Build engine instances (drive=False; consuming unless told not to) on one PostgreSQL
    database and one transport under a throw-away prefix, purged afterwards."""
    await reset_postgres(pg_url)
    prefix = f"rlinstance-{uuid.uuid4().hex[:8]}"
    engines: list[Engine] = []
    workers: list[tuple[Worker, asyncio.Task[None]]] = []

    def transport() -> Transport:
        return queue_transport(transport_kind, pg_url, prefix)

    async def build(name: str, *, consume: bool = True, **options: Any) -> Engine:
        engine = Engine(
            open_store(pg_url),
            transport=transport(),
            workflows=WORKFLOWS,
            steps=[where_on(name), charge],
            drive=False,
            consumers="never",
            **options,
        )
        engines.append(engine)
        if consume:
            await engine.start_consumers()
        return engine

    async def worker() -> None:
        w = Worker("instances", transport(), steps=[charge], poll_timeout=0.2)
        workers.append((w, asyncio.create_task(w.run())))

    build.worker = worker  # type: ignore[attr-defined]
    build.transport = transport  # type: ignore[attr-defined]
    yield build
    events["gate"].set()
    for w, task in workers:
        await w.stop()
        await task
        await w.transport.close()
    for engine in engines:
        await engine.__aexit__(None, None, None)
        assert engine.transport is not None
        await engine.transport.close()
    await purge(transport())


async def until(
    what: str, check: Callable[[], Any], seen: Callable[[], Any], within: float = 10.0
) -> None:
    """Wait (``within`` seconds at most) for ``check`` (sync or async) to hold; on giving up,
    say what was seen."""
    deadline = time.monotonic() + within
    while not (await check() if inspect.iscoroutinefunction(check) else check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within} s; saw {seen()}")
        await asyncio.sleep(0.02)


async def until_status(engine: Engine, run_id: str, status: RunStatus) -> None:
    seen: list[Any] = []

    async def reached() -> bool:
        run = await engine.get_run(run_id)
        seen.append(run.status if run else None)
        return bool(seen[-1] == status)

    await until(f"run {run_id} {status}", reached, lambda: seen[-3:])


async def start_all(producer: Engine, workflow: Any, ids: list[str]) -> None:
    """Start runs on a producer and wait until their messages are in the run queue."""
    assert producer._execution.run_queue is not None
    for run_id in ids:
        await producer.start(workflow, None, run_id=run_id)
    await producer._execution.run_queue.flushed()


async def all_completed(engine: Engine, ids: list[str]) -> list[Any]:
    done = [await engine.wait_for_run(run_id, timeout=15) for run_id in ids]
    assert [d.status for d in done] == [RunStatus.COMPLETED] * len(ids), done
    return [d.output for d in done]


async def test_start_consumers_makes_a_producer_execute_queued_runs_and_take_step_results(
    instance: Any,
) -> None:
    consumer = await instance("consumer", consume=False)
    web = await instance("web", consume=False)
    await instance.worker()
    await web.start(checkout, 5, run_id="early")
    assert web._execution.run_queue is not None
    await (
        web._execution.run_queue.flushed()
    )  # its message waits in the run queue: nobody consumes yet
    assert consumer._execution.run_queue is not None and not consumer._execution.run_queue.consuming
    assert (await web.get_run("early")).status == RunStatus.PENDING
    await consumer.start_consumers()
    # Only the consumer takes results: without it the remote steps would never be recorded.
    assert await all_completed(web, ["early"]) == [{"where": "consumer", "charged": 5}]
    await web.start(checkout, 7, run_id="late")
    assert await all_completed(web, ["late"]) == [{"where": "consumer", "charged": 7}]
    assert executed == ["consumer:early", "consumer:late"]


def record_takes(engine: Engine) -> list[tuple[int, int, int]]:
    """Each take from the run queue as (ids taken and not yet claimed, asked for, got)."""
    queue, transport = engine._execution.run_queue, engine.transport
    assert queue is not None and transport is not None
    takes: list[tuple[int, int, int]] = []
    take_runs = transport.take_runs

    async def recorded(namespaces: Any, codes: Any, max_items: int, timeout: float) -> Any:
        held = len(queue.taken)
        got = await take_runs(namespaces, codes, max_items, timeout)
        takes.append((held, max_items, len(got)))
        return got

    transport.take_runs = recorded  # type: ignore[method-assign]
    return takes


async def test_an_instance_stays_within_max_prefetch_and_max_local_runs_and_leaves_the_rest_queued(
    instance: Any,
) -> None:
    web = await instance("web", consume=False)
    ids = [f"b{n}" for n in range(6)]
    await start_all(web, held, ids)
    bounded = await instance("bounded", consume=False, max_prefetch=2, max_local_runs=3)
    takes = record_takes(bounded)
    await bounded.start_consumers()
    await until("bounded executes", lambda: occupancy["bounded"] >= 2, lambda: occupancy)
    await instance("other")
    # Every run executes at once somewhere: bounded kept none of them back as mere ids.
    await until("all six executing", lambda: occupancy.total() == 6, lambda: occupancy)
    assert 2 <= peak["bounded"] <= 3 and occupancy["other"] == 6 - occupancy["bounded"]
    assert takes and all(got <= asked <= 2 - held for held, asked, got in takes), takes
    events["gate"].set()
    await all_completed(web, ids)
    assert sorted(e.split(":")[1] for e in executed) == ids  # each step ran once


@redis_only
async def test_an_instance_fills_every_local_slot_when_max_prefetch_is_the_smaller_bound(
    instance: Any,
) -> None:
    web = await instance("web", consume=False)
    await start_all(web, held, ["f0", "f1", "f2"])
    await instance("bounded", max_prefetch=2, max_local_runs=3)
    await until("three at once", lambda: occupancy["bounded"] == 3, lambda: occupancy, within=2)


async def test_drain_hands_back_a_wake_taken_for_a_turn_in_flight_and_another_instance_runs_it(
    instance: Any,
) -> None:
    web = await instance("web", consume=False)
    leaving = await instance("leaving")
    assert web._execution.run_queue is not None and leaving._execution.run_queue is not None
    ids = ["p0", "p1"]
    taken = leaving._execution.run_queue.taken
    # One parent at a time, each in its step before the next one starts.
    done: list[str] = []
    for run_id in ids:
        await start_all(web, parent, [run_id])
        await until_status(web, f"{run_id}.kid", RunStatus.SUSPENDED)
        await web.signal(run_id, "parent-go")
        await web._execution.run_queue.flushed()
        done.append(run_id)
        await until("in its step", lambda: occupancy["leaving"] == len(done), lambda: occupancy)
    done.clear()
    for run_id in ids:
        await web.signal(run_id, "go", f"go {run_id}")  # buffered: the parent is mid-turn
        await web.signal(f"{run_id}.kid", "kid-go")
        await web._execution.run_queue.flushed()
        done.append(run_id)
        # The kid completes on the leaving instance and wakes its parent, whose turn is still
        # in flight there: the instance takes that wake from the queue and holds it as an id.
        await until("the wake taken", lambda: set(done) <= set(taken), lambda: dict(taken))
    # The turns finish only once the drain has begun: it hands the ids back instead of giving
    # the parents another turn here.
    asyncio.get_running_loop().call_soon(events["gate"].set)
    await leaving.drain(timeout=10)
    assert [(await web.get_run(run_id)).status for run_id in ids] == [RunStatus.SUSPENDED] * 2
    await instance("staying")  # consumes the queue only: it finds the parents through the ids
    assert await all_completed(web, ids) == [f"go {run_id}" for run_id in ids]
    assert sorted(executed) == [f"leaving:{run_id}" for run_id in ids]  # no step ran twice


@redis_only
async def test_starts_published_while_a_send_is_in_flight_still_reach_the_run_queue(
    instance: Any,
) -> None:
    web = await instance("web", consume=False)
    assert web.transport is not None and web._execution.run_queue is not None
    on_the_wire = asyncio.Event()
    enqueue_runs = web.transport.enqueue_runs

    async def slow(messages: Any) -> None:
        await on_the_wire.wait()  # the first send is in flight while the other starts come
        await enqueue_runs(messages)

    web.transport.enqueue_runs = slow
    ids = [f"s{n}" for n in range(4)]
    for run_id in ids:
        await web.start(visit, None, run_id=run_id)
    on_the_wire.set()
    await web._execution.run_queue.flushed()
    queue: Any = instance.transport()
    await queue.open()
    got: list[Any] = []
    deadline = time.monotonic() + 2
    while len(got) < len(ids) and time.monotonic() < deadline:
        got += await queue.take_runs(None, ["instances.visit@1"], 10, 0.2)
    await queue.close()
    assert sorted(m["run_id"] for m in got) == ids


@redis_only
async def test_a_failing_enqueue_leaves_starts_pending_for_the_poll_and_logs_once_a_minute(
    instance: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(run_queue_module, "SEND_RETRY_DELAYS", (0.01, 0.01, 0.01))
    engine = await instance("solo")
    failures = Counter[str]()

    async def unreachable(messages: Any) -> None:
        failures["enqueue"] += 1
        raise ConnectionError("run queue unreachable")

    assert engine.transport is not None and engine._execution.run_queue is not None
    engine.transport.enqueue_runs = unreachable
    ids = [f"e{n}" for n in range(5)]
    with caplog.at_level(logging.WARNING, logger="runlane.run_queue"):
        for run_id in ids:
            await engine.start(visit, None, run_id=run_id)
            await engine._execution.run_queue.flushed()  # each start's batch failed on its own
    assert failures["enqueue"] == 5 * 4  # every batch: the send and its three retries
    lines = [r.getMessage() for r in caplog.records if r.name == "runlane.run_queue"]
    assert len(lines) == 1 and "enqueue failed" in lines[0], lines
    assert [(await engine.get_run(run_id)).status for run_id in ids] == [RunStatus.PENDING] * 5
    assert await engine.run_pending() == 5
    assert await all_completed(engine, ids) == ["solo"] * 5


async def test_a_run_this_instance_is_about_to_claim_is_not_handed_off_by_its_own_timer_poll(
    instance: Any,
) -> None:
    # A remote result landed here made its run due and gave it a local task; before the task
    # claimed, this instance's own timer poll found the run due and handed it off (its wake time
    # pushed a lease ahead). Published, the timer could go to any instance, and the step after
    # the remote one would not run where its result landed; and the task's plain claim, finding
    # the run not due, would have been wasted. The poll keeps the run here instead, and the task
    # claims it as the hand-off it now is.
    web = await instance("web", consume=False)
    here = await instance("here")
    await start_all(web, kid, ["k"])
    await until_status(web, "k", RunStatus.SUSPENDED)
    execution = here._execution
    local, runqueue = execution._local, execution.run_queue
    assert local is not None and runqueue is not None
    published: list[str] = []
    publish = runqueue.publish_timers

    def recorded(runs: Iterable[Run]) -> None:
        runs = list(runs)
        published.extend(r.id for r in runs)
        publish(runs)

    runqueue.publish_timers = recorded
    # The signal made due in the store alone (no message), as a recorded result is.
    assert await here.store.deliver_signal("k", "kid-go", "landed", execution.now())
    await local._slots.acquire()  # the landed result's task exists but has not claimed yet
    task = local.spawn("k")
    assert await here.resume_due_timers() == 1  # the poll handed the due run off
    assert published == []
    local._slots.release()
    await asyncio.wait_for(task, 10)
    done = await web.wait_for_run("k", timeout=10)
    assert (done.status, done.output) == (RunStatus.COMPLETED, "landed")


async def test_runs_a_recovery_poll_finds_travel_the_run_queue_and_spread_over_the_fleet(
    instance: Any,
) -> None:
    """Six runs whose instance died holding them: one instance's recovery poll finds them
    all, and sends them through the run queue like any start, so the fleet shares them out
    (that instance takes only what it has room for)."""
    web = await instance("web", consume=False)
    ids = [f"lost-{n}" for n in range(6)]
    await start_all(web, held, ids)
    await purge(instance.transport())  # the start messages are lost with the dead instance
    for run_id in ids:  # leased to an instance that dies at once: each lease is already out
        now = web.now()
        claimed = await web.store.claim_run(
            run_id, "dead:1", now, now, singleton_retry=runlane.models.RetryTimer(1.0, 30.0)
        )
        assert claimed.claim is not None
    finder = await instance("finder", max_local_runs=2)
    await instance("other")  # the rest of the fleet
    assert await finder.recover_incomplete() == 6
    await until("all six executing", lambda: occupancy.total() == 6, lambda: occupancy)
    # The finder takes what it has room for at most; which consumer pops first is a race (on
    # the db transport, the other may take all six in one poll), but the other instance can
    # only have its runs from the run queue.
    assert occupancy["finder"] <= 2 and occupancy["other"] >= 4, occupancy
    assert await finder.recover_incomplete() == 0  # found again: not sent again
    events["gate"].set()
    await all_completed(web, ids)
    recovered = [await web.get_run(i) for i in ids]
    assert [r.recoveries for r in recovered if r is not None] == [1] * 6


def record_enqueued(engine: Engine) -> list[str]:
    """The ids of the run messages ``engine`` puts on the run queue, with their reasons."""
    transport = engine.transport
    assert transport is not None
    sent: list[str] = []
    enqueue_runs = transport.enqueue_runs

    async def recorded(messages: Any) -> None:
        sent.extend(f"{m['reason']}:{m['run_id']}" for m in messages)
        await enqueue_runs(messages)

    transport.enqueue_runs = recorded  # type: ignore[method-assign]
    return sent


async def test_windows_subscribers_handlers_children_continuations_and_requeues_travel_the_run_queue(
    instance: Any,
) -> None:
    web = await instance("web", consume=False)
    a, b = await instance("a"), await instance("b")
    sent = [record_enqueued(engine) for engine in (web, a, b)]
    await web.start(fails, None, run_id="f")
    await web.start(spawns, None, run_id="s")
    await web.start(continues, 0, run_id="c")
    await web.start(retried, None, run_id="r")
    await web.publish_event("instances.signed-up", {"user": 1}, id="e1")
    await web.schedules.upsert(runlane.Schedule("instances.every", visit, every=1))
    windows: list[Run] = []

    async def fired() -> bool:
        await web.fire_schedules()  # the producer fires; it runs nothing itself
        windows[:] = await web.list_runs(workflow=visit)
        return bool(windows)

    await until("a window fired", fired, lambda: windows)
    await web.schedules.delete("instances.every")
    assert (await web.wait_for_run("r", timeout=15)).status == RunStatus.FAILED
    await web.requeue("r")
    runs = {
        "handler": "f.failure.1",
        "child": "s.child",
        "continuation": "c~1",
        "requeue": "r",
        "subscriber": "instances.on-signup:event:e1",
        "window": windows[0].id,
    }
    for kind, run_id in runs.items():
        done = await web.wait_for_run(run_id, timeout=15)
        assert done.status == RunStatus.COMPLETED, (kind, done)
    messages = [message for one in sent for message in one]
    for kind, run_id in runs.items():
        assert any(m.split(":", 1)[1] == run_id for m in messages), (kind, messages)
    # Nobody drives a loop here: each of them ran on a consumer that took it off the queue.
    ran = {e.split(":", 1)[1]: e.split(":", 1)[0] for e in executed}
    for kind, run_id in runs.items():
        assert ran.get(run_id) in ("a", "b"), (kind, ran)
