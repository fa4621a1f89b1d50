"""Several engine instances sharing PostgreSQL and a transport (Redis, or the db transport).

Each instance has its own store and transport objects, as separate processes would; the
backends are real. Run messages, remote step tasks, results and heartbeats cross the transport.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import runlane
from runlane import Engine, Retry, RunStatus, StoreUnavailableError
from runlane.remote.worker import Worker
from runlane.stores import open_store
from runlane.transports import DbTransport, RedisTransport
from runlane.transports.base import Transport

REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")
executed_by: dict[str, list[str]] = {}


@runlane.step(name="billing.charge", group="billing", retry=Retry(max_attempts=2, backoff=0.05))
async def charge(order: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(order.get("seconds", 0.01))
    if order.get("fail_first") and not executed_by.setdefault("charge-failed", []):
        executed_by["charge-failed"].append("x")
        raise RuntimeError("gateway hiccup")
    return {"charged": order["amount"]}


@runlane.workflow(name="checkout")
async def checkout(ctx: runlane.Context, order: dict[str, Any]) -> Any:
    where = await ctx.step("where", None)
    paid = await ctx.step(charge, order)
    return {"where": where, **paid}


@runlane.workflow(name="checkout-watched")
async def checkout_watched(ctx: runlane.Context, order: dict[str, Any]) -> Any:
    return await ctx.step("billing.charge", order, group="billing", timeout=order["timeout"])


@runlane.workflow(name="checkout-then-where")
async def checkout_then_where(ctx: runlane.Context, order: dict[str, Any]) -> Any:
    await ctx.step("where", None)
    await ctx.step(charge, order)
    return await ctx.step("where", None)


@runlane.workflow(name="plain")
async def plain(ctx: runlane.Context, n: int) -> Any:
    first = await ctx.step("where", None)
    second = await ctx.step("where", None)
    return [first, second]


@runlane.workflow(name="waiter")
async def waiter(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="leaf")
async def leaf(ctx: runlane.Context, n: int) -> int:
    return n


@runlane.workflow(name="wide")
async def wide(ctx: runlane.Context, n: int) -> int:
    results = await ctx.all([ctx.child(leaf, i) for i in range(n)])
    return sum(results)


def where_step(name: str) -> Any:
    @runlane.step(name="where")
    def where() -> str:
        executed_by.setdefault(name, []).append("x")
        return name

    return where


@pytest.fixture(autouse=True)
def clear() -> None:
    executed_by.clear()


@pytest.fixture(params=["redis", "db"])
async def fleet(request: pytest.FixtureRequest, pg_url: str) -> AsyncIterator[Callable[..., Any]]:
    """Build engine instances (and workers) on one PostgreSQL database and one transport."""
    prefix = f"rlfleet-{uuid.uuid4().hex[:8]}"
    setup: Any = open_store(pg_url)
    await setup.open()
    await setup.reset_for_tests()
    await setup.close()
    engines: list[Engine] = []
    workers: list[tuple[Worker, asyncio.Task[None]]] = []

    def transport() -> Transport:
        if request.param == "redis":
            return RedisTransport(REDIS_URL, prefix=prefix)
        return DbTransport(pg_url, prefix=prefix, poll_interval=0.2)

    async def engine(name: str, *, enter: bool = True, **kwargs: Any) -> Engine:
        kwargs.setdefault("poll_interval", 0.2)
        built = Engine(
            open_store(pg_url),
            transport=transport(),
            workflows=[checkout, checkout_then_where, checkout_watched, plain, waiter, wide, leaf],
            steps=[where_step(name), charge],
            **kwargs,
        )
        engines.append(built)
        if enter:
            await built.__aenter__()
        return built

    async def worker(**kwargs: Any) -> Worker:
        kwargs.setdefault("heartbeat_interval", 0.1)
        w = Worker(group="billing", transport=transport(), steps=[charge], **kwargs)
        workers.append((w, asyncio.create_task(w.run())))
        return w

    engine.worker = worker  # type: ignore[attr-defined]
    engine.transport = transport  # type: ignore[attr-defined]
    yield engine
    for w, task in workers:
        await w.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await w.transport.close()
    for e in engines:
        # A turn still waiting in memory for a step no worker will answer is let go at once.
        await e.drain(timeout=1.0)
        await e.__aexit__(None, None, None)
        if e.transport is not None:
            await e.transport.close()
    cleaner: Any = transport()
    await cleaner.open()
    await cleaner.purge()
    await cleaner.close()


async def test_runs_started_by_a_producer_spread_over_every_instance(fleet: Any) -> None:
    producer = await fleet("producer", drive=False, consumers="never")
    for name in ("a", "b", "c"):
        await fleet(name)
    runs = []
    for n in range(60):
        runs.append(await producer.start(plain, n, run_id=f"spread-{n}"))
        # Paced over longer than a poll interval: an instance whose watch is still connecting
        # polls before the last start, rather than finding the queue already emptied.
        await asyncio.sleep(0.005)
    for run in runs:
        done = await producer.wait_for_run(run.id, timeout=30)
        assert done.status == RunStatus.COMPLETED
    assert "producer" not in executed_by
    assert len([n for n in ("a", "b", "c") if executed_by.get(n)]) >= 2, executed_by
    assert sum(len(v) for v in executed_by.values()) == 120  # every step exactly once


async def test_a_remote_step_runs_on_a_worker_and_its_result_lands_on_another_instance(
    fleet: Any,
) -> None:
    dispatcher = await fleet("dispatcher")
    other = await fleet("other")
    await fleet.worker()
    assert dispatcher._execution.remote is not None
    await dispatcher._execution.remote.stop()  # only the other instance consumes results now
    await dispatcher.start(checkout, {"amount": 5}, run_id="remote-1")
    done = await other.wait_for_run("remote-1", timeout=20)
    assert done.status == RunStatus.COMPLETED and done.output["charged"] == 5
    [_, step] = await other.list_steps("remote-1")
    assert step.status == "completed" and step.attempts == 1


async def test_a_result_another_instance_recorded_resolves_the_dispatchers_wait_in_memory(
    fleet: Any,
) -> None:
    # The step has a timeout: its turn waits in memory on the dispatcher, which takes no
    # results and hears no beats. The other instance takes the result and records it; the
    # dispatcher's wait finds it in the checkpoint when its window runs out.
    dispatcher = await fleet("dispatcher", heartbeat_persist_throttle=0.5)
    other = await fleet("other", drive=False, consumers="never", heartbeat_persist_throttle=0.5)
    assert dispatcher._execution.remote is not None and other._execution.remote is not None
    await dispatcher._execution.remote.stop()
    other._execution.remote.start()  # results and beats only: it takes no runs
    recorded: list[str] = []
    record = other.store.record_step_result

    async def recording(run_id: str, *args: Any, **kwargs: Any) -> Any:
        recorded.append(run_id)
        return await record(run_id, *args, **kwargs)

    setattr(other.store, "record_step_result", recording)  # noqa: B010 (a spy for the test)
    await fleet.worker()
    order = {"amount": 6, "timeout": 0.5, "seconds": 0.3}
    await dispatcher.start(checkout_watched, order, run_id="elsewhere-1")
    done = await dispatcher.wait_for_run("elsewhere-1", timeout=20)
    assert (done.status, done.output) == (RunStatus.COMPLETED, {"charged": 6}), done.error
    [step] = await dispatcher.list_steps("elsewhere-1")
    assert (step.status, step.attempts) == ("completed", 1)
    assert recorded == ["elsewhere-1"]


async def test_the_instance_that_takes_a_result_resumes_the_run_itself(fleet: Any) -> None:
    # The dispatcher takes no results: "other" records each one and, rather than publishing a
    # wake to the run queue (a second hop, which either instance could take), resumes the run
    # at once, so the step after the remote one always runs there.
    # The dispatcher's own passes come too seldom to race "other" for a run made due.
    dispatcher = await fleet("dispatcher", poll_interval=30)
    other = await fleet("other")
    assert dispatcher._execution.remote is not None
    await dispatcher._execution.remote.stop()
    for n in range(8):
        order = {"amount": n, "seconds": 0.01}
        await dispatcher.start(checkout_then_where, order, run_id=f"landed-{n}")
    # The worker comes once every run is suspended on its remote step: a result that landed
    # while the dispatcher still held the run would rightly be resumed by the dispatcher.
    for n in range(8):
        deadline = time.monotonic() + 20
        while (await other.get_run(f"landed-{n}")).status != RunStatus.SUSPENDED:
            assert time.monotonic() < deadline, f"landed-{n} never suspended"
            await asyncio.sleep(0.02)
    await fleet.worker()
    finals = [(await other.wait_for_run(f"landed-{n}", timeout=20)).output for n in range(8)]
    assert finals == ["other"] * 8


async def test_a_failed_remote_attempt_is_retried_per_its_policy(fleet: Any) -> None:
    engine = await fleet("solo")
    await fleet.worker()
    await engine.start(checkout, {"amount": 7, "fail_first": True}, run_id="retry-1")
    done = await engine.wait_for_run("retry-1", timeout=20)
    assert done.status == RunStatus.COMPLETED
    [_, step] = await engine.list_steps("retry-1")
    assert step.attempts == 2


async def test_a_worker_that_dies_after_taking_a_task_is_detected_within_the_step_timeout(
    fleet: Any,
) -> None:
    engine = await fleet("solo")
    doomed: Any = fleet.transport()
    await doomed.open()
    try:
        await engine.start(checkout_watched, {"amount": 1, "timeout": 0.5}, run_id="dead-1")
        # A worker takes the task, beats once as a worker does on taking it, then dies (SIGKILL).
        await doomed.publish_heartbeat(beat_for(await take_task(doomed, 1)))
        taken = time.monotonic()
        second = await take_task(doomed, 2)  # billing.charge has Retry(max_attempts=2)
        assert time.monotonic() - taken < 5 * 0.5, "attempt 1 was failed late"
        await doomed.publish_heartbeat(beat_for(second))
        taken = time.monotonic()
        done = await engine.wait_for_run("dead-1", timeout=20)
        assert time.monotonic() - taken < 5 * 0.5, "attempt 2 was failed late"
    finally:
        await doomed.close()
    assert done.status == RunStatus.FAILED
    assert done.error["type"] == "StepTimeoutError", done.error
    assert "no result or heartbeat" in done.error["message"]


async def test_a_dispatcher_that_heard_the_last_beat_itself_gets_no_persist_allowance(
    fleet: Any,
) -> None:
    # Two engines: whichever did not dispatch the step persists the doomed worker's one beat.
    # The dispatcher heard that beat too, so the 5 s persist throttle buys the dead worker
    # nothing: its attempt fails within the step's 0.5 s window, as on a single instance.
    engine = await fleet("a", heartbeat_persist_throttle=5.0)
    await fleet("b", heartbeat_persist_throttle=5.0)
    doomed: Any = fleet.transport()
    await doomed.open()
    try:
        await engine.start(checkout_watched, {"amount": 1, "timeout": 0.5}, run_id="dead-2")
        first = await take_task(doomed, 1)
        await doomed.publish_heartbeat(beat_for(first))
        beat = time.monotonic()
        await until_persisted(engine, "dead-2")
        await take_task(doomed, 2)  # attempt 1 was failed and retried
        failed_after = time.monotonic() - beat
    finally:
        await doomed.close()
    assert failed_after < 0.5 + 1.5, f"attempt 1 was failed after {failed_after:.2f}s"


async def until_persisted(engine: Engine, run_id: str) -> None:
    """Until some instance wrote the step's beat (the one that did not dispatch it)."""
    seen: list[Any] = []
    for _ in range(500):  # up to 10 s: the db transport's beat comes by its poll, on a busy host
        seen = await engine.list_steps(run_id)
        if any(s.last_heartbeat_at is not None or s.attempts > 1 for s in seen):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no instance persisted the beat; steps {seen}")


async def test_a_task_queued_longer_than_its_timeout_runs_once_a_worker_comes(fleet: Any) -> None:
    engine = await fleet("solo")
    await engine.start(checkout_watched, {"amount": 4, "timeout": 0.3}, run_id="queued-1")
    await asyncio.sleep(1.5)  # five step timeouts while no worker runs: queued is not dead
    [step] = await engine.list_steps("queued-1")
    assert (step.status, step.attempts, step.dispatches) == ("running", 1, 1), step
    await fleet.worker()
    done = await engine.wait_for_run("queued-1", timeout=20)
    assert done.status == RunStatus.COMPLETED, done.error
    [step] = await engine.list_steps("queued-1")
    assert step.attempts == 1, step


async def test_a_task_no_worker_takes_fails_once_its_redispatches_are_spent(fleet: Any) -> None:
    engine = await fleet("solo", remote_redispatch=0.3, remote_redispatch_max=2)
    # A timeout longer than the whole test: what fails the step is that nobody took it.
    await engine.start(checkout_watched, {"amount": 2, "timeout": 30.0}, run_id="untaken-1")
    done = await engine.wait_for_run("untaken-1", timeout=20)
    assert done.status == RunStatus.FAILED
    assert done.error["type"] == "StepTimeoutError", done.error
    assert "no worker took" in done.error["message"]
    [step] = await engine.list_steps("untaken-1")
    assert step.attempts == 2 and step.dispatches == 3, step  # each attempt: 1 send, 2 re-sends
    queue: Any = fleet.transport()
    await queue.open()
    try:
        tasks = await queue.take_tasks("billing", 100, 1.0)
    finally:
        await queue.close()
    assert sorted(t["attempt"] for t in tasks) == [1, 1, 1, 2, 2, 2], tasks


async def take_task(transport: Any, attempt: int) -> Any:
    """Take the billing task of ``attempt`` off the queue as a worker would (bounded poll)."""
    seen: list[Any] = []
    for _ in range(100):
        seen += await transport.take_tasks("billing", 10, 0.1)
        found = [t for t in seen if t["attempt"] == attempt]
        if found:
            return found[0]
    raise AssertionError(f"no task for attempt {attempt} came; saw {seen}")


def beat_for(task: Any) -> Any:
    """The heartbeat a worker publishes for ``task`` (see Worker._beat)."""
    return {
        "step_id": task["step_id"],
        "run_id": task["run_id"],
        "seq": task["seq"],
        "attempt": task["attempt"],
        "worker": "doomed",
        "at": datetime.now(UTC).isoformat(),
    }


def deafen_dispatchers(*engines: Engine) -> None:
    """Whichever engine dispatches a step (any may take the run from the queue) hears none of
    its beats, as when its subscription is down; the others hear them and persist them."""
    for engine in engines:
        remote = engine._execution.remote
        assert remote is not None
        hear = remote._heard_beat

        async def heard(beat: Any, hear: Any = hear, remote: Any = remote) -> None:
            if (str(beat.get("step_id")), int(beat.get("attempt") or 0)) not in remote._waiters:
                await hear(beat)

        remote._heard_beat = heard  # type: ignore[method-assign]


async def test_a_live_worker_is_never_failed_over_when_its_beats_land_elsewhere(fleet: Any) -> None:
    dispatcher = await fleet("dispatcher", heartbeat_persist_throttle=0.1)
    listener = await fleet("listener", heartbeat_persist_throttle=0.1)
    await fleet.worker()
    deafen_dispatchers(dispatcher, listener)
    await dispatcher.start(
        checkout_watched, {"amount": 9, "timeout": 0.6, "seconds": 2.0}, run_id="live-1"
    )
    done = await dispatcher.wait_for_run("live-1", timeout=20)
    assert done.status == RunStatus.COMPLETED, done.error
    [step] = await dispatcher.list_steps("live-1")
    assert step.attempts == 1


async def test_a_beat_persisted_elsewhere_buys_one_persist_interval_of_silence(fleet: Any) -> None:
    # The listener persists a beat at most once a second; the step's window is 0.6 s. Between
    # two persisted beats the dispatcher (which hears none itself) must allow one persist
    # interval more, or it fails a live worker over (seed 003, rule 3).
    dispatcher = await fleet("dispatcher", heartbeat_persist_throttle=1.0)
    listener = await fleet("listener", heartbeat_persist_throttle=1.0)
    await fleet.worker()
    deafen_dispatchers(dispatcher, listener)
    await dispatcher.start(
        checkout_watched, {"amount": 9, "timeout": 0.6, "seconds": 2.5}, run_id="live-2"
    )
    done = await dispatcher.wait_for_run("live-2", timeout=20)
    assert done.status == RunStatus.COMPLETED, done.error
    [step] = await dispatcher.list_steps("live-2")
    assert step.attempts == 1


async def test_a_step_whose_worker_beats_is_not_sent_again_however_long_it_runs(
    fleet: Any,
) -> None:
    # Found by the simulation with workers: a step without a timeout is judged silent by the
    # beat persisted last, and beats were persisted at most every heartbeat_persist_throttle
    # (10 s) whatever remote_redispatch was: a step running longer than the window was sent
    # again while its worker beat. Persisted at least every third of the window now.
    engine = await fleet("solo", remote_redispatch=0.6)
    await fleet.worker()
    await engine.start(checkout, {"amount": 7, "seconds": 2.0}, run_id="long-1")
    done = await engine.wait_for_run("long-1", timeout=20)
    assert done.status == RunStatus.COMPLETED, done.error
    [_, step] = await engine.list_steps("long-1")
    assert (step.attempts, step.dispatches) == (1, 1), step


async def test_a_result_held_through_an_outage_lands_before_its_step_is_sent_again(
    fleet: Any,
) -> None:
    # The "seen once" triple execution of the chaos run: while PostgreSQL's connections kept
    # failing and reconnecting, an engine held each result through a retry pause that grew to
    # 5 s, past the 3 s redispatch window, and a turn whose own writes went through sent the
    # step again. The pause is at most a third of the window now.
    engine = await fleet("solo", remote_redispatch=2.4)
    store: Any = engine.store
    record, failed = store.record_step_result, list[str]()

    async def flapping(*args: Any, **kwargs: Any) -> Any:
        if len(failed) < 3:
            failed.append(args[0])
            raise StoreUnavailableError("the connection was reset")
        return await record(*args, **kwargs)

    store.record_step_result = flapping
    await fleet.worker()
    await engine.start(checkout, {"amount": 8}, run_id="held-1")
    done = await engine.wait_for_run("held-1", timeout=20)
    assert done.status == RunStatus.COMPLETED, done.error
    assert failed == ["held-1"] * 3
    [_, step] = await engine.list_steps("held-1")
    assert (step.attempts, step.dispatches) == (1, 1), step


async def test_a_lost_dispatch_is_sent_again(fleet: Any) -> None:
    engine = await fleet("solo", remote_redispatch=0.5, remote_redispatch_max=3)
    await engine.start(checkout, {"amount": 3}, run_id="lost-1")
    black_hole: Any = fleet.transport()
    await black_hole.open()
    swallowed: list[Any] = []
    for _ in range(50):
        swallowed += await black_hole.take_tasks("billing", 10, 0.1)
        if swallowed:
            break
    await black_hole.close()
    assert swallowed, "the first dispatch never arrived"
    await fleet.worker()
    done = await engine.wait_for_run("lost-1", timeout=20)
    assert done.status == RunStatus.COMPLETED
    [_, step] = await engine.list_steps("lost-1")
    assert step.attempts == 1


async def test_a_lost_wake_is_reconciled_by_the_timer_poll(fleet: Any) -> None:
    producer = await fleet("producer", drive=False, consumers="never")
    await fleet("a")
    await producer.start(waiter, None, run_id="wake-1")
    for _ in range(100):
        if (await producer.get_run("wake-1")).status == RunStatus.SUSPENDED:
            break
        await asyncio.sleep(0.05)

    async def lose(messages: Any) -> None:
        return None

    assert producer.transport is not None
    setattr(producer.transport, "enqueue_runs", lose)  # noqa: B010 (a hook for the test)
    await producer.signal("wake-1", "go", "late")
    done = await producer.wait_for_run("wake-1", timeout=20)
    assert done.output == "late"


async def test_drain_during_a_burst_loses_nothing(fleet: Any) -> None:
    producer = await fleet("producer", drive=False, consumers="never")
    leaving = await fleet("leaving")
    await fleet("staying")
    runs = [await producer.start(plain, n, run_id=f"burst-{n}") for n in range(80)]
    await asyncio.sleep(0.2)
    await leaving.drain(timeout=5)
    for run in runs:
        assert (await producer.wait_for_run(run.id, timeout=30)).status == RunStatus.COMPLETED
    assert sum(len(v) for v in executed_by.values()) == 160


@pytest.mark.slow
async def test_a_fan_of_ten_thousand_children_completes(fleet: Any) -> None:
    engines = [await fleet(name, max_prefetch=256, max_local_runs=512) for name in ("a", "b")]
    await engines[0].start(wide, 10_000, run_id="wide-1")
    done = await engines[0].wait_for_run("wide-1", timeout=300)
    assert done.status == RunStatus.COMPLETED
    assert done.output == sum(range(10_000))
