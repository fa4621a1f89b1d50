"""Store outages never decide a run's outcome, on every store.

A turn that meets an outage gives its run back (due now, with what it recorded) or leaves its
lease to expire; the body never sees the outage; API calls retry once, then raise
``StoreUnavailableError``; the loop backs off and resumes by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import runlane
from runlane import Engine, RunStatus, StoreUnavailableError
from runlane.stores.base import Store
from runlane.testing import ManualClock
from tests.helpers import Calls, settle
from tests.outages import FlakyStore

calls = Calls()


@runlane.step(name="outage.a")
async def step_a(x: int) -> int:
    calls.hit("a")
    return x + 1


@runlane.step(name="outage.b")
async def step_b(x: int) -> int:
    calls.hit("b")
    return x * 10


@runlane.workflow(name="outage.two")
async def two(ctx: runlane.Context, x: int) -> int:
    return int(await ctx.step(step_b, await ctx.step(step_a, x)))


@runlane.workflow(name="outage.guarded")
async def guarded(ctx: runlane.Context, x: int) -> Any:
    # A body that catches everything must still never see an outage as its own error.
    try:
        return await ctx.step(step_b, await ctx.step(step_a, x))
    except Exception as exc:
        return f"caught {type(exc).__name__}"


@runlane.workflow(name="outage.event")
async def event_waiter(ctx: runlane.Context, _: Any) -> Any:
    try:
        return await ctx.wait_for_event("outage.go", timeout=60)
    except Exception as exc:
        return f"caught {type(exc).__name__}"


@runlane.workflow(name="outage.signal")
async def signal_waiter(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("go")


WORKFLOWS = [two, guarded, event_waiter, signal_waiter]


async def _through_flaky(
    make_engine: Callable[..., Any], *workflows: Any, **options: Any
) -> tuple[Engine, FlakyStore]:
    """An engine reaching the shared backend through the fault injector."""
    plain = await make_engine(*workflows, **options)
    store = FlakyStore(plain.store)
    engine = await make_engine(*workflows, share_store=False, **options)
    engine.store = store
    engine._execution.leases._store = store
    return engine, store


@pytest.fixture
async def flaky(make_engine: Callable[..., Any]) -> tuple[Engine, FlakyStore]:
    calls.counts.clear()
    return await _through_flaky(make_engine, *WORKFLOWS)


async def _steps(engine: Engine, run_id: str) -> list[tuple[int, str, Any]]:
    return [(s.seq, s.status, s.output) for s in await engine.list_steps(run_id)]


async def test_a_checkpoint_cut_by_an_outage_neither_fails_the_run_nor_runs_a_step_again(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    store.fail("checkpoint")  # the flush of step a's record, before step b starts
    await engine.run_pending()
    run = await engine.get_run("r")
    assert run is not None and run.status == RunStatus.SUSPENDED, run
    # The release carried step a's record: the next turn replays it, it does not run again.
    assert await _steps(engine, "r") == [(1, "completed", 2)]
    done = await settle(engine, "r")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)
    assert (calls["a"], calls["b"]) == (1, 1)


async def test_a_checkpoint_that_committed_before_the_outage_is_not_applied_twice(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    store.fail("checkpoint", when="after")
    done = await settle(engine, "r")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)
    assert await _steps(engine, "r") == [(1, "completed", 2), (2, "completed", 20)]
    assert (calls["a"], calls["b"]) == (1, 1)


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_settlement_cut_by_an_outage_still_completes_the_run_once(
    flaky: tuple[Engine, FlakyStore], when: Any
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    store.fail("settle_run", when=when)
    done = await settle(engine, "r")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)
    assert await _steps(engine, "r") == [(1, "completed", 2), (2, "completed", 20)]
    assert (calls["a"], calls["b"]) == (1, 1)


async def test_when_the_release_fails_too_the_run_is_given_back_once_the_store_answers(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    store.fail("checkpoint")
    store.fail("suspend_run")  # the release
    await engine.run_pending()
    run = await engine.get_run("r")
    assert run is not None and run.status == RunStatus.RUNNING, run
    # The next pass gives it back with step a's record, before its lease ran out.
    done = await settle(engine, "r")
    assert (done.status, done.output, done.recoveries) == (RunStatus.COMPLETED, 20, 0)
    assert (calls["a"], calls["b"]) == (1, 1)


async def test_a_run_its_engine_could_not_give_back_is_recovered_when_the_lease_expires(
    flaky: tuple[Engine, FlakyStore], make_engine: Callable[..., Any], clock: ManualClock
) -> None:
    engine, store = flaky
    other = await make_engine(*WORKFLOWS)
    await engine.start(two, 1, run_id="r")
    store.fail("checkpoint")
    store.fail("suspend_run")  # the release
    await engine.run_pending()
    store.down = True
    await engine.drain(timeout=1)  # it stops while the store is still away from it
    assert await other.tick() == 0  # leased: nothing to do until the lease expires
    clock.advance(engine.options.lease + 1)
    done = await settle(other, "r")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)
    # The step in flight ran again (its record was never written); nothing else did.
    assert (calls["a"], calls["b"]) == (2, 1)


async def test_an_outage_never_reaches_a_body_that_catches_every_exception(
    flaky: tuple[Engine, FlakyStore], clock: ManualClock
) -> None:
    engine, store = flaky
    await engine.start(guarded, 1, run_id="g")
    store.fail("checkpoint")  # the flush before step b, inside the body's try
    await engine.run_pending()
    store.fail("checkpoint")
    store.fail("suspend_run")  # and the release: the lease is left to expire
    await engine.tick()
    clock.advance(engine.options.lease + 1)
    done = await settle(engine, "g")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)


async def test_an_outage_in_a_read_inside_the_body_is_not_the_bodys_error(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    await engine.start(event_waiter, None, run_id="e")
    store.fail("latest_event_seq")
    await engine.run_pending()
    run = await engine.get_run("e")
    assert run is not None and not run.is_terminal, run
    await engine.tick()  # now it waits for the event
    await engine.publish_event("outage.go", {"ok": True})
    done = await settle(engine, "e")
    assert (done.status, done.output) == (RunStatus.COMPLETED, {"ok": True})


@pytest.mark.parametrize("read", ["get_run", "list_runs", "list_steps"])
async def test_reads_are_tried_once_more_then_raise_store_unavailable(
    flaky: tuple[Engine, FlakyStore], read: str
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    calls_of: dict[str, Callable[[], Any]] = {
        "get_run": lambda: engine.get_run("r"),
        "list_runs": lambda: engine.list_runs(),
        "list_steps": lambda: engine.list_steps("r"),
    }
    store.fail(read)
    assert await calls_of[read]() is not None  # the retry answered
    store.fail(read, times=2)
    with pytest.raises(StoreUnavailableError) as raised:
        await calls_of[read]()
    assert isinstance(raised.value.cause, psycopg.OperationalError)


async def test_wait_for_run_waits_through_an_outage(
    flaky: tuple[Engine, FlakyStore], make_engine: Callable[..., Any]
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    await settle(await make_engine(*WORKFLOWS), "r")  # elsewhere: the wait here must read it
    store.fail("get_run", times=3)
    done = await engine.wait_for_run("r", timeout=10)
    assert done.status == RunStatus.COMPLETED
    store.down = True
    with pytest.raises(StoreUnavailableError):
        await engine.wait_for_run("r", timeout=0.3)


async def test_a_start_whose_write_committed_before_the_outage_returns_its_run(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    store.fail("create_runs", when="after")
    run = await engine.start(two, 1, run_id="s", if_exists="fail")
    assert run.id == "s" and run.status == RunStatus.PENDING
    done = await settle(engine, "s")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)
    assert (calls["a"], calls["b"]) == (1, 1)
    # A start of an id that really existed before is still refused.
    with pytest.raises(runlane.RunExistsError):
        await engine.start(two, 1, run_id="s", if_exists="fail")


async def test_a_start_that_cannot_reach_the_store_raises_and_creates_nothing(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    store.fail("create_runs", times=2)
    with pytest.raises(StoreUnavailableError):
        await engine.start(two, 1, run_id="s")
    assert await engine.get_run("s") is None


async def test_a_batch_whose_write_committed_before_the_outage_returns_its_runs(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="old")
    store.fail("create_runs", when="after")
    starts = [runlane.Start(two, 1, run_id=i, if_exists="fail") for i in ("s1", "s2", "old")]
    first, second, old = await engine.start_many(starts)
    assert first.ok and second.ok and first.result().status == RunStatus.PENDING
    assert isinstance(old.error, runlane.RunExistsError)  # it existed before: still refused
    assert (await settle(engine, "s2")).status == RunStatus.COMPLETED


async def test_a_batch_that_cannot_reach_the_store_raises_and_creates_nothing(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    store.fail("create_runs", times=2)
    with pytest.raises(StoreUnavailableError):
        await engine.start_many([runlane.Start(two, 1, run_id="s1"), runlane.Start(two, 2)])
    assert await engine.get_run("s1") is None


async def test_writes_that_are_not_idempotent_raise_store_unavailable_at_once(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    await engine.start(signal_waiter, None, run_id="w")
    await engine.tick()
    store.fail("deliver_signal")
    with pytest.raises(StoreUnavailableError):
        await engine.signal("w", "go", 1)
    assert store.pending("deliver_signal") == 0
    store.fail("cancel_run")
    with pytest.raises(StoreUnavailableError):
        await engine.cancel("w")
    run = await engine.get_run("w")
    assert run is not None and run.status == RunStatus.SUSPENDED  # nothing was delivered
    await engine.signal("w", "go", 7)
    done = await settle(engine, "w")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 7)


async def test_a_claim_cut_by_an_outage_leaves_the_run_for_the_next_pass(
    flaky: tuple[Engine, FlakyStore],
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    store.fail("claim_run")
    await engine.run_pending()
    run = await engine.get_run("r")
    assert run is not None and run.status == RunStatus.PENDING
    done = await settle(engine, "r")
    assert done.status == RunStatus.COMPLETED


@pytest.mark.parametrize(
    ("phase", "poll"),
    [
        ("tick", "pending_run_ids"),
        ("run_pending", "pending_run_ids"),
        ("resume_due_timers", "due_run_ids"),
        ("recover_incomplete", "expired_run_ids"),
        ("sweep_timeouts", "timed_out_run_ids"),
    ],
)
async def test_a_pass_called_by_hand_tries_a_poll_once_more_then_raises_store_unavailable(
    flaky: tuple[Engine, FlakyStore], phase: str, poll: str
) -> None:
    # A drive=False engine's tick() is an API call: never the driver's own exception.
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    store.fail(poll)
    await getattr(engine, phase)()  # the second try answered
    assert store.pending(poll) == 0
    store.fail(poll, times=2)
    with pytest.raises(StoreUnavailableError) as raised:
        await getattr(engine, phase)()
    assert isinstance(raised.value.cause, psycopg.OperationalError)
    done = await settle(engine, "r")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)


async def test_the_loop_backs_off_while_the_store_is_down_and_resumes_by_itself(
    make_store: Callable[[], Store], store_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls.counts.clear()
    inner = make_store()
    if store_kind == "postgres":
        await inner.open()
        await inner.reset_for_tests()  # type: ignore[attr-defined]
        await inner.close()
    store = FlakyStore(inner)
    engine = Engine(store, workflows=WORKFLOWS, poll_interval=0.05)
    with caplog.at_level(logging.WARNING, logger="runlane.execution"):
        async with engine:
            store.down = True
            await asyncio.sleep(0.2)
            before = store.calls["pending_run_ids"]
            await asyncio.sleep(1.5)
            polls = store.calls["pending_run_ids"] - before
            # Without the backoff the loop would poll ~30 times in 1.5 s (every 0.05 s).
            assert polls <= 6, polls
            store.down = False
            await asyncio.sleep(0.1)
            run = await engine.start(two, 2, run_id="after")
            done = await engine.wait_for_run(run.id, timeout=15)
            assert (done.status, done.output) == (RunStatus.COMPLETED, 30)
    lines = [r.getMessage() for r in caplog.records if r.name == "runlane.execution"]
    assert sum("unavailable" in line for line in lines) == 1, lines
    assert sum("available again" in line for line in lines) == 1, lines


async def test_an_execution_that_keeps_meeting_outages_is_never_settled_failed(
    flaky: tuple[Engine, FlakyStore], clock: ManualClock
) -> None:
    engine, store = flaky
    await engine.start(two, 1, run_id="r")
    for _ in range(5):
        store.fail("checkpoint")
        store.fail("suspend_run")
        await engine.tick()
        clock.advance(timedelta(seconds=engine.options.lease + 1))
    done = await settle(engine, "r")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)


@runlane.step(name="outage.remote", group="outage")
async def remote_step(x: int) -> int:
    calls.hit("remote")
    return x + 100


@runlane.workflow(name="outage.remote-flow")
async def remote_flow(ctx: runlane.Context, x: int) -> Any:
    return await ctx.step(remote_step, x)


async def _flaky_engine_and_worker(
    make_engine: Callable[..., Any], workflow: Any, step: Any, **options: Any
) -> tuple[Any, FlakyStore, Any]:
    """An engine consuming over an in-process transport through a ``FlakyStore``, and a worker
    (not yet running) for ``step`` beating every 0.1 s."""
    from runlane.remote.worker import Worker
    from runlane.transports import InProcessTransport

    transport = InProcessTransport()
    engine, store = await _through_flaky(make_engine, workflow, transport=transport, **options)
    await engine.start_consumers()
    worker = Worker("outage", transport, steps=[step], poll_timeout=0.1, heartbeat_interval=0.1)
    return engine, store, worker


async def test_a_remote_result_taken_while_the_store_is_down_is_recorded_when_it_is_back(
    make_engine: Callable[..., Any],
) -> None:
    calls.counts.clear()
    engine, store, worker = await _flaky_engine_and_worker(make_engine, remote_flow, remote_step)
    working = asyncio.create_task(worker.run())
    try:
        await engine.start(remote_flow, 1, run_id="rr")
        store.fail("record_step_result", times=2)  # the worker's result meets the outage
        await engine.run_pending()  # dispatches, then the run suspends durably
        for _ in range(100):
            if store.calls["record_step_result"] >= 3:
                break
            await asyncio.sleep(0.1)
        assert store.calls["record_step_result"] >= 3, store.calls
        done = await settle(engine, "rr")
        assert (done.status, done.output) == (RunStatus.COMPLETED, 101)
        assert calls["remote"] == 1  # recorded once it could be, never executed again
    finally:
        await worker.stop()
        await working


@runlane.step(name="outage.slow")
async def slow_step(x: int) -> int:
    calls.hit(f"slow:{x}")
    await asyncio.sleep(0.1)
    return x


@runlane.workflow(name="outage.slow-three")
async def slow_three(ctx: runlane.Context, x: int) -> Any:
    return [await ctx.step(slow_step, x * 10 + n) for n in range(3)]


async def test_a_sqlite_file_locked_past_the_busy_timeout_fails_no_run(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import sqlite3
    import threading

    from runlane.stores.sqlite import SqliteStore

    calls.counts.clear()
    path = tmp_path / "locked.db"
    engine = Engine(
        SqliteStore(path, busy_timeout=0.2), workflows=[slow_three], poll_interval=0.1, lease=3.0
    )
    locked, release = threading.Event(), threading.Event()

    def hold_the_write_lock() -> None:
        # Another process's long write transaction, as a migration or a backup would hold it.
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(10)
        conn.execute("COMMIT")
        conn.close()

    async with engine:
        runs = [await engine.start(slow_three, n, run_id=f"l{n}") for n in range(30)]
        await asyncio.sleep(0.05)
        holder = threading.Thread(target=hold_the_write_lock)
        holder.start()
        await asyncio.to_thread(locked.wait, 5)
        mid_way = [r for r in await engine.list_runs(limit=100) if not r.is_terminal]
        await asyncio.sleep(2.0)  # ten busy timeouts
        during = await engine.list_runs(status=RunStatus.FAILED)
        release.set()
        await asyncio.to_thread(holder.join, 5)
        done = [await engine.wait_for_run(r.id, timeout=30) for r in runs]
    assert len(mid_way) == 30, "the lock was taken after the runs had finished"
    assert during == []
    assert [(d.status, d.output) for d in done] == [
        (RunStatus.COMPLETED, [n * 10, n * 10 + 1, n * 10 + 2]) for n in range(30)
    ]
    # Only a step in flight when its write met the lock ran again, and at most once more.
    assert all(count <= 2 for count in calls.counts.values()), calls.counts
    assert any("unavailable" in r.getMessage() for r in caplog.records)


async def test_leases_left_to_expire_by_outages_never_make_a_run_dead(
    make_engine: Callable[..., Any], clock: ManualClock
) -> None:
    # Poison-pill protection counts lease expiries: a turn that could not give its run back
    # during an outage must do so once the store answers again, or each outage counts as one.
    calls.counts.clear()
    plain = await make_engine(*WORKFLOWS)
    store = FlakyStore(plain.store)
    engine = await make_engine(*WORKFLOWS, share_store=False, max_recovery_attempts=1)
    engine.store = store
    engine._execution.leases._store = store
    await engine.start(two, 1, run_id="r")
    for _ in range(3):
        store.fail("checkpoint")
        store.fail("suspend_run")  # the release, too: the lease is left as it is
        await engine.tick()
        clock.advance(engine.options.lease + 1)
    done = await settle(engine, "r")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)


async def test_a_run_taken_over_before_it_could_be_given_back_is_left_to_its_new_owner(
    flaky: tuple[Engine, FlakyStore], make_engine: Callable[..., Any], clock: ManualClock
) -> None:
    engine, store = flaky
    other = await make_engine(*WORKFLOWS)
    await engine.start(two, 1, run_id="r")
    store.fail("checkpoint")
    store.fail("suspend_run")
    await engine.run_pending()
    assert len(engine._execution.releases) == 1
    clock.advance(engine.options.lease + 1)
    done = await settle(other, "r")  # the outage outlasted the lease: another recovers it
    assert (done.status, done.output) == (RunStatus.COMPLETED, 20)
    await engine.tick()  # its give-back finds the lease gone and changes nothing
    assert len(engine._execution.releases) == 0
    run = await engine.get_run("r")
    assert run is not None and (run.status, run.output) == (RunStatus.COMPLETED, 20)


@runlane.step(name="outage.beating", group="outage")
async def beating_step(x: int) -> int:
    await asyncio.sleep(1.0)
    return x


@runlane.workflow(name="outage.beating-flow")
async def beating_flow(ctx: runlane.Context, x: int) -> Any:
    return await ctx.step(beating_step, x)


async def test_a_heartbeat_that_meets_an_outage_is_persisted_with_the_next_beat(
    make_engine: Callable[..., Any],
) -> None:
    # Beats are persisted at most every 5 s: a lost one must not hold the next one back.
    engine, store, worker = await _flaky_engine_and_worker(
        make_engine, beating_flow, beating_step, heartbeat_persist_throttle=5.0
    )
    working = asyncio.create_task(worker.run())
    try:
        await engine.start(beating_flow, 7, run_id="hb")
        store.fail("record_heartbeat")
        await engine.run_pending()  # dispatched; the run suspends durably while it runs
        beat_at = None
        for _ in range(8):
            await asyncio.sleep(0.1)
            [record] = await engine.list_steps("hb")
            beat_at = record.last_heartbeat_at
            if beat_at is not None:
                break
        assert store.pending("record_heartbeat") == 0, "no beat met the outage"
        assert beat_at is not None, store.calls
        for _ in range(30):
            if store.calls["record_step_result"]:
                break
            await asyncio.sleep(0.1)
        done = await settle(engine, "hb")
        assert (done.status, done.output) == (RunStatus.COMPLETED, 7)
    finally:
        await worker.stop()
        await working


# ---------------------------------------------------------------- step queues


@runlane.step(name="outage.queued", queue="outage.slots")
async def queued_step(x: int) -> int:
    calls.hit("queued")
    return x + 1


@runlane.workflow(name="outage.queued-twice")
async def queued_twice(ctx: runlane.Context, x: int) -> int:
    # The second admission carries the release of the first step's slot in its write.
    return int(await ctx.step(queued_step, await ctx.step(queued_step, x)))


@runlane.workflow(name="outage.queued-side-by-side")
async def queued_side_by_side(ctx: runlane.Context, x: int) -> Any:
    # A queued step released while its sibling still runs frees its slot in a write of its own.
    first, _ = await ctx.all([ctx.step(queued_step, x), ctx.step(step_a, x)])
    return await ctx.step(queued_step, first)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize(
    ("workflow", "method", "calls_before"),
    [
        (queued_twice, "admit_step", 1),  # the second admission, which carries the release
        (queued_side_by_side, "release_steps", 0),
    ],
)
async def test_a_slot_whose_release_meets_an_outage_is_freed_when_the_run_is_given_back(
    make_engine: Callable[..., Any],
    workflow: Any,
    method: str,
    calls_before: int,
    when: Any,
) -> None:
    # The write that frees a queued step's slot may be cut by an outage: the run's give-back
    # must free it, or the run (its attempt recorded, so never asking again) holds it until it
    # settles, and with one slot waits for itself for ever (a chaos run found three runs
    # deadlocked so over a queue of two slots).
    calls.counts.clear()
    slots = [runlane.StepQueue("outage.slots", concurrency=1)]
    engine, store = await _through_flaky(
        make_engine, workflow, steps=[queued_step, step_a], queues=slots
    )
    await engine.start(workflow, 1, run_id="q")
    store.fail(method, when=when, after=calls_before)
    await engine.run_pending()
    assert store.pending(method) == 0, store.calls
    done = await settle(engine, "q")
    assert (done.status, done.output) == (RunStatus.COMPLETED, 3), done
    assert calls["queued"] == 2  # the step whose release was cut did not run again
    [view] = await engine.store.queue_views()
    assert view.entries == (), view
