"""Singleton workflows: a durable FIFO mutex per key, on every store."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import RunStatus, Singleton, SingletonQueueFullError
from runlane.clock import SystemClock
from runlane.models import RetryTimer, Settlement, Writes

from ..helpers import count_claims, settle

inside: dict[str, int] = {}
peak: dict[str, int] = {}
admitted: list[str] = []

NO_WAIT = RetryTimer(0.0, 0.0)  # a denied waiter is due again at once


@pytest.fixture(autouse=True)
def reset() -> None:
    inside.clear()
    peak.clear()
    admitted.clear()


def by_store(i: dict[str, Any]) -> str:
    return f"store:{i['store']}"


async def enter(ctx: runlane.Context, key: str) -> None:
    inside[key] = inside.get(key, 0) + 1
    peak[key] = max(peak.get(key, 0), inside[key])
    admitted.append(ctx.run_id)


@runlane.workflow(name="sync", singleton=Singleton(key=by_store))
async def sync(ctx: runlane.Context, i: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return ctx.run_id


@runlane.workflow(name="sync-sleepy", singleton=Singleton(key=by_store))
async def sync_sleepy(ctx: runlane.Context, i: dict[str, Any]) -> str:
    await ctx.sleep(i.get("sleep", 10))
    return ctx.run_id


@runlane.workflow(name="quick", singleton=Singleton(key=by_store, limit=2))
async def quick(ctx: runlane.Context, i: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return ctx.run_id


@runlane.workflow(name="bounded", singleton=Singleton(key=by_store, max_queue_depth=2))
async def bounded(ctx: runlane.Context, i: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return ctx.run_id


@runlane.workflow(name="keep", singleton=Singleton(key=by_store, on_busy="reject"))
async def keep(ctx: runlane.Context, i: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return ctx.run_id


@runlane.workflow(name="latest", singleton=Singleton(key=by_store, on_busy="replace"))
async def latest(ctx: runlane.Context, i: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return ctx.run_id


async def queue_up(engine: Any, clock: Any, ids: list[str], workflow: Any = sync) -> None:
    """Start runs on key store:A one after the other (distinct created_at), then one tick."""
    for run_id in ids:
        await engine.start(workflow, {"store": "A"}, run_id=run_id)
        clock.advance(0.001)
    await engine.tick()


async def statuses(engine: Any, *ids: str) -> list[str]:
    return [(await engine.get_run(i)).status.value for i in ids]


async def test_second_start_for_busy_key_waits_and_other_keys_run(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync)
    await engine.start(sync, {"store": "A"}, run_id="a1")
    clock.advance(0.001)
    await engine.start(sync, {"store": "A"}, run_id="a2")
    await engine.start(sync, {"store": "B"}, run_id="b1")
    await engine.tick()
    a1, a2, b1 = [await engine.get_run(i) for i in ("a1", "a2", "b1")]
    assert a1.holds_slot and b1.holds_slot and not a2.holds_slot
    assert a2.status == RunStatus.BLOCKED and a2.wake_at is not None
    assert timedelta(seconds=0.75) <= a2.wake_at - clock.now() <= timedelta(seconds=1.25)
    assert await engine.list_steps("a2") == []


async def test_a_start_behind_a_busy_key_is_left_to_the_release(make_engine: Any) -> None:
    """No claim is spent on a start the store already knows is queued behind the holder."""
    engine = await make_engine(sync, drive=True, clock=SystemClock(), poll_interval=30)
    await engine.__aenter__()
    await engine.start(sync, {"store": "A"}, run_id="holder")
    for _ in range(200):
        if (await engine.get_run("holder")).status == RunStatus.SUSPENDED:
            break
        await asyncio.sleep(0.01)
    await engine.start(sync, {"store": "A"}, run_id="queued")
    await asyncio.sleep(0.2)
    queued = await engine.get_run("queued")
    # Created parked (blocked, its fallback timer set, one denial counted) and never claimed:
    # a claim would have counted a second denial.
    assert queued.status == RunStatus.BLOCKED and queued.wake_at is not None
    assert queued.admission_retries == 1
    await engine.signal("holder", "done")
    for _ in range(200):
        if (await engine.get_run("queued")).status == RunStatus.SUSPENDED:
            break
        await asyncio.sleep(0.01)
    queued = await engine.get_run("queued")
    assert queued.holds_slot and queued.status == RunStatus.SUSPENDED  # handed the slot
    await engine.signal("queued", "done")
    assert (await engine.wait_for_run("queued", timeout=10)).status == RunStatus.COMPLETED


async def until_status(engine: Any, run_id: str, status: RunStatus, timeout: float = 5.0) -> Any:
    for _ in range(int(timeout / 0.01)):
        run = await engine.get_run(run_id)
        if run.status == status:
            return run
        await asyncio.sleep(0.01)
    raise AssertionError(f"{run_id} is {run.status}, not {status}, after {timeout}s")


async def test_cancelling_a_waiting_holder_runs_the_next_waiter_at_once(make_engine: Any) -> None:
    """The cancellation's wake-up is dispatched, not left to a timer poll 30 s away."""
    engine = await make_engine(
        sync, drive=True, clock=SystemClock(), poll_interval=30, singleton_retry=30
    )
    await engine.__aenter__()
    await engine.start(sync, {"store": "A"}, run_id="holder")
    await until_status(engine, "holder", RunStatus.SUSPENDED)
    for waiter in ("first", "second"):
        await engine.start(sync, {"store": "A"}, run_id=waiter)
        await until_status(engine, waiter, RunStatus.BLOCKED)
    assert await engine.cancel("holder")
    first = await until_status(engine, "first", RunStatus.SUSPENDED)
    assert first.holds_slot
    # A waiter the slot went to, cancelled before it finishes: the next one runs at once too.
    assert await engine.cancel("first")
    assert (await until_status(engine, "second", RunStatus.SUSPENDED)).holds_slot
    await engine.signal("second", "done")
    assert (await engine.wait_for_run("second", timeout=10)).status == RunStatus.COMPLETED


async def test_retries_behind_a_full_key_are_denied_in_one_write_not_a_claim_each(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync)
    waiters = [f"w{n}" for n in range(12)]
    await queue_up(engine, clock, ["holder", *waiters])
    claims = count_claims(engine)
    clock.advance(2)  # every waiter's first fallback (1 s +/- 25%) has come
    await engine.tick()
    assert claims == []
    for run in [await engine.get_run(w) for w in waiters]:
        assert run.status == RunStatus.BLOCKED and run.admission_retries == 2
        assert run.wake_at is not None and run.wake_at > clock.now()
    await engine.signal("holder", "done")
    await engine.tick()  # the release wakes the oldest waiter, which a claim admits
    assert (await engine.get_run("w0")).holds_slot
    assert [r.id for r in await engine.list_runs() if r.holds_slot] == ["w0"]


async def test_a_chain_of_three_hands_over_without_any_timer_advance(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync)
    await queue_up(engine, clock, [f"r{n}" for n in range(3)])
    for n in range(3):
        assert await statuses(engine, f"r{n}") == ["suspended"]
        assert (await engine.get_run(f"r{n}")).holds_slot
        await engine.signal(f"r{n}", "done")
        await engine.tick()
        assert await statuses(engine, f"r{n}") == ["completed"]


async def test_five_waiters_are_admitted_in_fifo_order(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(sync)
    ids = [f"w{n}" for n in range(6)]
    for run_id in reversed(ids):  # ids sort opposite to creation time: order must follow time
        await engine.start(sync, {"store": "A"}, run_id=run_id)
        clock.advance(0.001)
    await engine.tick()
    order = []
    for _ in ids:
        [holder] = [r for r in await engine.list_runs() if r.holds_slot]
        order.append(holder.id)
        await engine.signal(holder.id, "done")
        await engine.tick()
    assert order == list(reversed(ids))


async def test_limit_two_breaks_same_timestamp_ties_by_id(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(quick)
    for run_id in ["d", "b", "a", "c"]:
        await engine.start(quick, {"store": "A"}, run_id=run_id)
    await engine.tick()
    holders = sorted(r.id for r in await engine.list_runs() if r.holds_slot)
    assert holders == ["a", "b"]
    await engine.start(quick, {"store": "A"}, run_id="0")  # same timestamp, smaller id
    await engine.tick()
    assert sorted(r.id for r in await engine.list_runs() if r.holds_slot) == ["a", "b"]
    await engine.signal("a", "done")
    await engine.tick()
    assert sorted(r.id for r in await engine.list_runs() if r.holds_slot) == ["0", "b"]


async def test_back_pressure_refuses_then_accepts_after_a_slot_frees(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(bounded)
    for n in range(3):
        await engine.start(bounded, {"store": "A"}, run_id=f"r{n}")
    with pytest.raises(SingletonQueueFullError) as info:
        await engine.start(bounded, {"store": "A"}, run_id="r3")
    assert (info.value.workflow, info.value.key, info.value.max_queue_depth) == (
        "bounded",
        "store:A",
        2,
    )
    assert await engine.get_run("r3") is None
    await engine.start(bounded, {"store": "B"}, run_id="b0")
    assert (await engine.start(bounded, {"store": "A"}, run_id="r0")).id == "r0"  # idempotent
    await engine.tick()
    await engine.signal("r0", "done")
    await engine.tick()
    assert (await engine.start(bounded, {"store": "A"}, run_id="r3")).status == RunStatus.BLOCKED


async def test_reject_mode_keeps_the_running_one(make_engine: Any) -> None:
    engine = await make_engine(keep)
    await engine.start(keep, {"store": "A"}, run_id="first")
    with pytest.raises(SingletonQueueFullError):
        await engine.start(keep, {"store": "A"}, run_id="second")
    await engine.tick()
    assert await statuses(engine, "first") == ["suspended"]


async def test_replace_mode_cancels_the_running_one_and_takes_the_slot(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(latest)
    await engine.start(latest, {"store": "A"}, run_id="old")
    await engine.tick()
    clock.advance(1)
    await engine.start(latest, {"store": "A"}, run_id="new")
    assert await statuses(engine, "old") == ["cancelled"]
    await engine.tick()
    assert (await engine.get_run("new")).holds_slot
    await engine.start(latest, {"store": "A"}, run_id="newer")
    await engine.start(latest, {"store": "A"}, run_id="newest")
    live = [r.id for r in await engine.list_runs() if not r.is_terminal]
    assert live == ["newest"]


async def test_holders_keep_their_slot_across_sleep_lease_expiry_and_restart(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync_sleepy, lease=5)
    await engine.start(sync_sleepy, {"store": "A", "sleep": 10}, run_id="holder")
    clock.advance(0.001)
    await engine.start(sync_sleepy, {"store": "A"}, run_id="waiter")
    await engine.tick()
    assert (await engine.get_run("holder")).holds_slot
    # a turn that dies mid-way: the lease expires, the slot stays
    now = clock.advance(10)
    await engine.store.claim_run(
        "holder", "dead:1", now, now + timedelta(seconds=5), singleton_retry=NO_WAIT
    )
    clock.advance(6)
    restarted = await make_engine(sync_sleepy, lease=5)
    await restarted.resume_due_timers()
    assert not (await engine.get_run("waiter")).holds_slot
    await restarted.recover_incomplete()
    assert await statuses(engine, "holder", "waiter") == ["completed", "suspended"]
    clock.advance(10)
    assert (await settle(restarted, "waiter")).status == RunStatus.COMPLETED


async def test_cancelling_a_holder_frees_the_slot_and_cancelling_a_waiter_does_not(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync)
    await queue_up(engine, clock, [f"r{n}" for n in range(3)])
    await engine.cancel("r1")
    await engine.tick()
    assert [(await engine.get_run(f"r{n}")).holds_slot for n in range(3)] == [True, False, False]
    await engine.cancel("r0")
    await engine.tick()
    assert (await engine.get_run("r2")).holds_slot


async def test_a_waiter_woken_for_a_slot_and_cancelled_passes_the_slot_on_at_once(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync)
    await queue_up(engine, clock, [f"r{n}" for n in range(3)])
    # Another instance settles r0 and dies before telling anyone; the release woke r1 (the
    # oldest waiter), which is then cancelled before it runs. The cancellation wakes r2: the
    # slot is not left idle until r2's fallback timer.
    await engine.signal("r0", "done")
    now = clock.now()
    claim = await engine.store.claim_run(
        "r0", "other:1", now, now + timedelta(seconds=30), singleton_retry=NO_WAIT
    )
    assert claim.claim is not None
    settled = await engine.store.settle_run(
        "r0", "other:1", Writes(), Settlement(RunStatus.COMPLETED), now
    )
    assert settled.woken == ["r1"]
    await engine.cancel("r1")
    await engine.tick()  # no time passes: r2's fallback timer is not what admits it
    assert (await engine.get_run("r2")).holds_slot


@runlane.workflow(name="critical", singleton=Singleton(key=by_store, limit=2))
async def critical(ctx: runlane.Context, i: dict[str, Any]) -> None:
    key = by_store(i)
    await enter(ctx, key)
    await ctx.step(tiny_pause, None)
    inside[key] -= 1


@runlane.step(name="tiny-pause")
async def tiny_pause(_: Any) -> None:
    await asyncio.sleep(0.002)


async def test_three_engines_hammering_one_key_never_exceed_the_limit(make_engine: Any) -> None:

    engines = [
        await make_engine(
            critical, drive=True, clock=SystemClock(), poll_interval=0.05, singleton_retry=0.2
        )
        for _ in range(3)
    ]
    for engine in engines:
        await engine.__aenter__()
    try:
        ids = []
        for n in range(30):
            run = await engines[n % 3].start(critical, {"store": "hot"}, run_id=f"c{n:02d}")
            ids.append(run.id)
        for run_id in ids:
            assert (await engines[0].wait_for_run(run_id, timeout=60)).status == RunStatus.COMPLETED
    finally:
        for engine in engines:
            await engine.drain()
    assert peak["store:hot"] <= 2
    runs = {r.id: r for r in await engines[0].list_runs(limit=100)}
    created = sorted(ids, key=lambda i: (runs[i].created_at, i))
    assert len(admitted) == 30
    # FIFO admission up to the slot count: nobody enters before a run created two places earlier
    for pos, run_id in enumerate(admitted):
        assert created.index(run_id) <= pos + 1, (pos, run_id, admitted)


# ---------------------------------------------------------------- paths the conformance audit named

failures: dict[str, int] = {}


@runlane.workflow(name="sync-once-failing", singleton=Singleton(key=by_store))
async def sync_once_failing(ctx: runlane.Context, i: dict[str, Any]) -> str:
    if i.get("fail") and not failures.get(ctx.run_id):
        failures[ctx.run_id] = 1
        raise ValueError("the first attempt failed")
    await ctx.wait_for_signal("done")
    return ctx.run_id


async def test_a_requeued_failed_run_behind_a_holder_is_blocked_without_a_slot(
    make_engine: Any, clock: Any
) -> None:
    failures.clear()
    engine = await make_engine(sync_once_failing)
    await engine.start(sync_once_failing, {"store": "A", "fail": True}, run_id="failed")
    assert (await settle(engine, "failed")).status == RunStatus.FAILED
    clock.advance(0.001)
    await engine.start(sync_once_failing, {"store": "A"}, run_id="holder")
    await engine.tick()
    await engine.requeue("failed")
    await engine.tick()
    failed, holder = [await engine.get_run(i) for i in ("failed", "holder")]
    assert (failed.status, failed.holds_slot) == (RunStatus.BLOCKED, False)
    assert (holder.status, holder.holds_slot) == (RunStatus.SUSPENDED, True)
    await engine.signal("holder", "done")
    await engine.tick()
    failed = await engine.get_run("failed")
    assert (failed.status, failed.holds_slot) == (RunStatus.SUSPENDED, True)


async def test_a_cancelling_holder_keeps_its_slot_and_is_settled_not_run_by_the_next_claim(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync, lease=5)
    await queue_up(engine, clock, ["holder", "waiter"])
    # The holder's turn is in flight on an engine that dies: cancelled meanwhile, it is
    # cancelling, and keeps the slot while its lease holds (its turn may still write).
    await engine.signal("holder", "done")
    now = clock.now()
    held = await engine.store.claim_run(
        "holder", "dead:1", now, now + timedelta(seconds=5), singleton_retry=NO_WAIT
    )
    assert held.claim is not None
    assert await engine.cancel("holder")
    await engine.tick()
    assert await statuses(engine, "holder", "waiter") == ["cancelling", "blocked"]
    assert not (await engine.get_run("waiter")).holds_slot
    # The lease ends: the claim that finds it settles it cancelled (its body never runs again,
    # though its signal came) and the slot passes to the waiter.
    clock.advance(6)
    await engine.tick()
    holder, waiter = [await engine.get_run(i) for i in ("holder", "waiter")]
    assert (holder.status, holder.output, holder.holds_slot) == (RunStatus.CANCELLED, None, False)
    assert (waiter.status, waiter.holds_slot) == (RunStatus.SUSPENDED, True)


async def test_reject_mode_starts_a_new_run_once_the_previous_one_ended(make_engine: Any) -> None:
    engine = await make_engine(keep)
    await engine.start(keep, {"store": "A"}, run_id="first")
    await engine.tick()
    await engine.signal("first", "done")
    assert (await settle(engine, "first")).status == RunStatus.COMPLETED
    second = await engine.start(keep, {"store": "A"}, run_id="second")
    assert second.status == RunStatus.PENDING
    await engine.tick()
    run = await engine.get_run("second")
    assert (run.status, run.holds_slot) == (RunStatus.SUSPENDED, True)
    with pytest.raises(SingletonQueueFullError):  # and busy again while it runs
        await engine.start(keep, {"store": "A"}, run_id="third")


async def test_an_unscoped_store_shares_a_singleton_key_and_a_quota_across_namespaces(
    make_engine: Any, clock: Any
) -> None:
    eu = await make_engine(sync, tenant_quota, namespace="eu")
    us = await make_engine(sync, tenant_quota, namespace="us")
    await eu.start(sync, {"store": "A"}, run_id="eu-sync")
    clock.advance(0.001)
    await us.start(sync, {"store": "A"}, run_id="us-sync")
    await eu.tick()
    await us.tick()
    eu_run, us_run = [await eu.get_run(i) for i in ("eu-sync", "us-sync")]
    assert (eu_run.namespace, us_run.namespace) == ("eu", "us")
    assert eu_run.holds_slot and us_run.status == RunStatus.BLOCKED and not us_run.holds_slot
    await eu.start(tenant_quota, {"tenant": "acme"}, run_id="eu-report")
    with pytest.raises(runlane.ConcurrencyLimitError) as refused:
        await us.start(tenant_quota, {"tenant": "acme"}, run_id="us-report")
    assert (refused.value.key, refused.value.active) == ("tenant:acme", 1)
    await eu.signal("eu-sync", "done")
    await eu.tick()
    await us.tick()
    assert (await us.get_run("us-sync")).holds_slot  # the slot came from the other namespace


@runlane.workflow(
    name="tenant-quota",
    concurrency=runlane.Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=1),
)
async def tenant_quota(ctx: runlane.Context, i: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return ctx.run_id
