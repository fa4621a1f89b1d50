"""Behaviours users rely on, as the README and the guides state them, on every store."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import Engine, RunStatus

from ..helpers import Calls, settle

calls = Calls()
gate: dict[str, asyncio.Event] = {}


@runlane.step(name="conf.held")
async def held(name: str) -> str:
    """Runs until the test opens its gate: lets a test act while a step is executing."""
    calls.hit(name)
    await gate[name].wait()
    return f"{name} done"


async def _while_step_runs(engine: Engine, run_id: str, name: str) -> asyncio.Task[int]:
    """Start the run's turn and return once its step ``name`` is executing."""
    gate[name] = asyncio.Event()
    turn = asyncio.create_task(engine.run_pending())
    for _ in range(500):
        if calls[name]:
            return turn
        await asyncio.sleep(0.01)
    raise AssertionError(f"step {name} never started; run is {await engine.get_run(run_id)}")


# ---------------------------------------------------------------- 1. cancel during the last step


@runlane.workflow(name="conf.returns")
async def returns_after_step(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.step(held, "returns")


@runlane.workflow(name="conf.raises")
async def raises_after_step(ctx: runlane.Context, _: Any) -> Any:
    await ctx.step(held, "raises")
    raise ValueError("the body failed after its step")


@runlane.workflow(name="conf.continues")
async def continues_after_step(ctx: runlane.Context, n: Any) -> Any:
    await ctx.step(held, "continues")
    ctx.continue_as_new((n or 0) + 1)


@pytest.mark.parametrize(
    ("workflow", "step"),
    [
        (returns_after_step, "returns"),
        (raises_after_step, "raises"),
        (continues_after_step, "continues"),
    ],
)
async def test_a_cancel_accepted_during_the_last_step_ends_the_run_cancelled(
    make_engine: Any, workflow: Any, step: str
) -> None:
    calls.counts.clear()
    engine = await make_engine(workflow)
    await engine.start(workflow, None, run_id="c")
    turn = await _while_step_runs(engine, "c", step)
    assert await engine.cancel("c") is True
    assert (await engine.get_run("c")).status == RunStatus.CANCELLING
    gate[step].set()  # the step finishes; the body returns, raises or continues as new
    await turn
    run = await settle(engine, "c")
    assert (run.status, run.output) == (RunStatus.CANCELLED, None)
    assert await engine.list_steps("c") == []  # the step's result was discarded
    assert await engine.get_run("c~1") is None  # no continuation
    assert calls[step] == 1


# ---------------------------------------------------------------- 2. FatalError subclasses


class QuotaExhausted(runlane.FatalError):
    """The provider's quota is gone for the month: retrying cannot help."""


@runlane.step(name="conf.exhausted", retry=runlane.Retry(max_attempts=5, backoff=0.0))
async def exhausted(_: Any) -> None:
    calls.hit("exhausted")
    raise QuotaExhausted("no quota left")


@runlane.workflow(name="conf.fatal")
async def fatal_flow(ctx: runlane.Context, _: Any) -> Any:
    try:
        await ctx.step(exhausted, None)
    except runlane.FatalError as exc:
        return f"gave up: {type(exc).__name__}"


async def test_a_subclass_of_fatal_error_is_never_retried(make_engine: Any) -> None:
    calls.counts.clear()
    engine = await make_engine(fatal_flow)
    await engine.start(fatal_flow, None, run_id="f")
    run = await settle(engine, "f")
    assert (run.status, run.output) == (RunStatus.COMPLETED, "gave up: QuotaExhausted")
    assert calls["exhausted"] == 1
    [record] = await engine.list_steps("f")
    assert (record.status, record.attempts) == ("failed", 1)
    assert record.error is not None and record.error["fatal"] is True
    assert record.error["type"] == "QuotaExhausted"


async def test_a_replayed_fatal_subclass_is_still_a_fatal_error(make_engine: Any) -> None:
    from runlane.errors import raise_stored

    engine = await make_engine(fatal_flow)
    await engine.start(fatal_flow, None, run_id="f")
    await settle(engine, "f")
    [record] = await engine.list_steps("f")
    replayed = raise_stored(record.error or {})
    assert isinstance(replayed, runlane.FatalError)
    assert "no quota left" in str(replayed)


def test_a_remote_workers_error_record_says_whether_it_is_fatal() -> None:
    from runlane.errors import error_dict, is_fatal

    assert error_dict(QuotaExhausted("x"))["fatal"] is True
    assert "fatal" not in error_dict(ValueError("x"))
    assert is_fatal({"type": "CardDeclined", "fatal": True})  # another language's fatal error
    assert is_fatal({"type": "FatalError"})  # a worker that predates the field
    assert not is_fatal({"type": "QuotaExhausted"})  # a name alone says nothing


@runlane.step(name="conf.remote-exhausted", group="conf", retry=runlane.Retry(max_attempts=5))
async def remote_exhausted(_: Any) -> None:
    calls.hit("remote-exhausted")
    raise QuotaExhausted("no quota left")


@runlane.workflow(name="conf.remote-fatal")
async def remote_fatal_flow(ctx: runlane.Context, _: Any) -> Any:
    try:
        await ctx.step(remote_exhausted, None)
    except runlane.FatalError as exc:
        # The worker's exception class is not here: it comes back as a FatalError that keeps
        # the worker's type name.
        return f"gave up: {getattr(exc, 'type', type(exc).__name__)}"


async def test_a_fatal_subclass_raised_on_a_remote_worker_is_never_retried(
    make_engine: Any,
) -> None:
    from runlane.transports import InProcessTransport

    calls.counts.clear()
    transport = InProcessTransport()
    engine = await make_engine(remote_fatal_flow, transport=transport)
    await engine.start_consumers()
    worker = runlane.Worker("conf", transport, steps=[remote_exhausted], poll_timeout=0.05)
    working = asyncio.create_task(worker.run())
    try:
        await engine.start(remote_fatal_flow, None, run_id="rf")
        for _ in range(200):
            await engine.tick()
            run = await engine.get_run("rf")
            if run is not None and run.is_terminal:
                break
            await asyncio.sleep(0.02)
        assert run is not None
        assert (run.status, run.output) == (RunStatus.COMPLETED, "gave up: QuotaExhausted")
        assert calls["remote-exhausted"] == 1
    finally:
        await worker.stop()
        await working


# ---------------------------------------------------------------- 4, 5. singleton scope, lane tags


def store_key(input: dict[str, Any]) -> str:
    return f"store:{input['store']}"


@runlane.workflow(name="conf.sync", singleton=runlane.Singleton(key=store_key))
async def sync_inventory(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return str(await ctx.wait_for_signal("go"))


@runlane.workflow(name="conf.report", singleton=runlane.Singleton(key=store_key))
async def gen_report(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return str(await ctx.wait_for_signal("go"))


@runlane.workflow(name="conf.global-a", singleton=runlane.Singleton(key=store_key, scope="global"))
async def global_a(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return str(await ctx.wait_for_signal("go"))


@runlane.workflow(name="conf.global-b", singleton=runlane.Singleton(key=store_key, scope="global"))
async def global_b(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return str(await ctx.wait_for_signal("go"))


@runlane.workflow(
    name="conf.quota",
    concurrency=runlane.Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=5),
)
async def quota_flow(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return str(await ctx.wait_for_signal("go"))


LANES = [sync_inventory, gen_report, global_a, global_b, quota_flow]


async def _statuses(engine: Engine, *run_ids: str) -> list[str]:
    await engine.tick()
    await engine.tick()
    runs = [await engine.get_run(run_id) for run_id in run_ids]
    return [str(run.status if run else None) for run in runs]


async def test_two_workflows_using_one_key_never_block_each_other(make_engine: Any) -> None:
    engine = await make_engine(*LANES)
    await engine.start(sync_inventory, {"store": "A"}, run_id="sync")
    await engine.start(gen_report, {"store": "A"}, run_id="report")
    await engine.start(sync_inventory, {"store": "A"}, run_id="sync-2")
    # Each workflow has its own lane for store:A: both hold a slot; the second sync waits.
    assert await _statuses(engine, "sync", "report", "sync-2") == [
        "suspended",
        "suspended",
        "blocked",
    ]


async def test_a_global_lane_is_shared_by_every_workflow_that_declares_it(
    make_engine: Any,
) -> None:
    engine = await make_engine(*LANES)
    await engine.start(global_a, {"store": "A"}, run_id="a")
    await engine.start(global_b, {"store": "A"}, run_id="b")
    await engine.start(sync_inventory, {"store": "A"}, run_id="scoped")
    # b waits behind a in the global lane; the workflow-scoped lane never shares their slots.
    assert await _statuses(engine, "a", "b", "scoped") == ["suspended", "blocked", "suspended"]
    await engine.signal("a", "go", 1)
    assert await _statuses(engine, "a", "b") == ["completed", "suspended"]


async def test_every_gated_run_carries_its_lane_tags(make_engine: Any) -> None:
    engine = await make_engine(*LANES)
    await engine.start(sync_inventory, {"store": "A"}, run_id="holder", tags=["mine"])
    await engine.start(sync_inventory, {"store": "A"}, run_id="waiter")
    await engine.start(gen_report, {"store": "A"}, run_id="other")
    await engine.start(quota_flow, {"tenant": "acme"}, run_id="q")
    await engine.tick()
    lane = await engine.list_runs(tag="singleton:store:A")
    assert sorted(r.id for r in lane) == ["holder", "other", "waiter"]
    holder = await engine.get_run("holder")
    assert set(holder.tags) == {"mine", "singleton:store:A"}
    [quota] = await engine.list_runs(tag="concurrency:tenant:acme")
    assert quota.id == "q"
    only_sync = await engine.list_runs(workflow="conf.sync", tag="singleton:store:A")
    assert sorted(r.id for r in only_sync) == ["holder", "waiter"]


@runlane.workflow(
    name="conf.reject",
    singleton=runlane.Singleton(key=store_key, on_busy="reject"),
)
async def reject_flow(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return str(await ctx.wait_for_signal("go"))


async def test_a_full_backlog_names_the_users_key_not_the_lane(make_engine: Any) -> None:
    engine = await make_engine(reject_flow)
    await engine.start(reject_flow, {"store": "A"}, run_id="first")
    with pytest.raises(runlane.SingletonQueueFullError) as refused:
        await engine.start(reject_flow, {"store": "A"}, run_id="second")
    assert refused.value.key == "store:A"
    assert refused.value.workflow == "conf.reject"
    assert await engine.get_run("second") is None


def test_lanes_are_unambiguous_whatever_the_names_hold() -> None:
    from runlane.admission import lane, lane_parts

    assert lane("workflow", "a:b", "c") != lane("workflow", "a", "b:c")
    assert lane("global", "x", "1:x:k") != lane("workflow", "x", "k")
    for scope, workflow, key in [
        ("workflow", "a:b", "c:d"),
        ("global", "w", "9:zz"),
        ("workflow", "", "k"),
    ]:
        parts = lane_parts(lane(scope, workflow, key))
        assert parts == (workflow if scope == "workflow" else None, key)


def test_a_singleton_scope_other_than_workflow_or_global_is_a_definition_error() -> None:
    with pytest.raises(
        runlane.DefinitionError if hasattr(runlane, "DefinitionError") else Exception
    ):
        runlane.Singleton(key=store_key, scope="tenant")  # type: ignore[arg-type]


# ---------------------------------------------------------------- 10. waiters are blocked, and quiet


async def test_waiters_are_blocked_and_back_off_while_the_holder_waits(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync_inventory)
    await engine.start(sync_inventory, {"store": "A"}, run_id="holder")
    for n in range(5):
        clock.advance(0.001)
        await engine.start(sync_inventory, {"store": "A"}, run_id=f"w{n}")
    await engine.tick()
    holder = await engine.get_run("holder")
    assert holder.status == RunStatus.SUSPENDED and holder.holds_slot  # waits for its signal
    waiters = [await engine.get_run(f"w{n}") for n in range(5)]
    assert {w.status for w in waiters} == {RunStatus.BLOCKED}
    # Two minutes of the holder waiting, the engine polling every second: each waiter's timer
    # doubles (1, 2, 4, ... up to the 30 s lease), so its row is rewritten a handful of times,
    # not every second.
    for _ in range(120):
        clock.advance(1.0)
        await engine.tick()
    retries = [(await engine.get_run(f"w{n}")).admission_retries for n in range(5)]
    assert all(5 <= r <= 9 for r in retries), retries
    # The release still hands the slot over at once, whatever the timers say.
    await engine.signal("holder", "go", 1)
    await engine.tick()
    first = await engine.get_run("w0")
    assert first.holds_slot and first.status != RunStatus.BLOCKED


async def test_a_waiters_fallback_timer_is_jittered_and_never_waits_longer_than_a_lease(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync_inventory, singleton_retry=1.0, lease=20.0)
    await engine.start(sync_inventory, {"store": "A"}, run_id="holder")
    ids = [f"w{n}" for n in range(8)]
    for run_id in ids:
        clock.advance(0.001)
        await engine.start(sync_inventory, {"store": "A"}, run_id=run_id)
    # The delay each denial set, per waiter, from the instant it was parked (its start, which
    # found the key full, counts the first): read right after the tick that re-parked it.
    delays: dict[str, list[float]] = {run_id: [] for run_id in ids}
    denials = dict.fromkeys(ids, 0)
    for _ in range(400):
        await engine.tick()
        for run_id in ids:
            run = await engine.get_run(run_id)
            assert run.status == RunStatus.BLOCKED and run.wake_at is not None
            if run.admission_retries != denials[run_id]:
                denials[run_id] = run.admission_retries
                delays[run_id].append((run.wake_at - run.updated_at).total_seconds())
        clock.advance(1.0)
    firsts = [d[0] for d in delays.values()]
    # Waiters parked together do not all come back together.
    assert all(0.75 <= d <= 1.25 for d in firsts) and len(set(firsts)) > 1, firsts
    # The backoff doubles up to the lease and stays there.
    for run_id, seen in delays.items():
        assert max(seen) <= 20.0 and seen[-1] == 20.0, (run_id, seen)


# ---------------------------------------------------------------- 3. a requeue is a start for the quota


@runlane.step(name="conf.flaky")
async def flaky_step(input: dict[str, Any]) -> str:
    if input.get("fail"):
        raise RuntimeError("the tenant's API was down")
    return "ok"


@runlane.workflow(
    name="conf.tenant-job",
    concurrency=runlane.Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=2),
)
async def tenant_job(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    if input.get("wait"):
        await ctx.wait_for_signal("go")
    return await ctx.step(flaky_step, input)


async def test_requeue_of_a_run_whose_quota_is_full_is_refused_and_changes_nothing(
    make_engine: Any,
) -> None:
    engine = await make_engine(tenant_job)
    await engine.start(tenant_job, {"tenant": "acme", "fail": True}, run_id="failed")
    failed = await settle(engine, "failed")
    assert failed.status == RunStatus.FAILED
    for n in range(2):
        await engine.start(tenant_job, {"tenant": "acme", "wait": True}, run_id=f"busy{n}")
    await engine.tick()
    with pytest.raises(runlane.ConcurrencyLimitError) as refused:
        await engine.requeue("failed")
    assert (refused.value.key, refused.value.limit, refused.value.active) == ("tenant:acme", 2, 2)
    after = await engine.get_run("failed")
    assert after == failed  # nothing changed: still failed, same error and steps
    # Once a slot frees, the same requeue goes through.
    await engine.signal("busy0", "go")
    await settle(engine, "busy0")
    requeued = await engine.requeue("failed")
    assert requeued.status == RunStatus.PENDING


async def test_requeue_applies_the_per_start_quota_the_run_was_admitted_under(
    make_engine: Any,
) -> None:
    engine = await make_engine(tenant_job)
    override = runlane.Concurrency(key="vip", limit=1)
    await engine.start(
        tenant_job, {"tenant": "acme", "fail": True}, run_id="failed", concurrency=override
    )
    assert (await settle(engine, "failed")).status == RunStatus.FAILED
    await engine.start(
        tenant_job, {"tenant": "x", "wait": True}, run_id="vip", concurrency=override
    )
    await engine.tick()
    with pytest.raises(runlane.ConcurrencyLimitError) as refused:
        await engine.requeue("failed")
    assert (refused.value.key, refused.value.limit) == ("vip", 1)


async def test_requeue_into_a_full_singleton_backlog_is_refused(make_engine: Any) -> None:
    engine = await make_engine(reject_flow)
    await engine.start(reject_flow, {"store": "A"}, run_id="first")
    await engine.tick()
    await engine.cancel("first")
    await engine.start(reject_flow, {"store": "A"}, run_id="second")
    await engine.tick()
    with pytest.raises(runlane.SingletonQueueFullError):
        await engine.requeue("first")
    assert (await engine.get_run("first")).status == RunStatus.CANCELLED


# ---------------------------------------------------------------- 9. the reconcile bound


@runlane.step(name="conf.far", group="nobody")
async def far_step(_: Any) -> None:
    return None


@runlane.workflow(name="conf.far-flow")
async def far_flow(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.step(far_step, None)


async def test_a_waiting_remote_step_is_rechecked_within_the_reconcile_interval_every_time(
    make_engine: Any, clock: Any
) -> None:
    from runlane.transports import InProcessTransport

    engine = await make_engine(
        far_flow,
        transport=InProcessTransport(),
        remote_redispatch=100.0,
        reconcile_interval=10.0,
    )
    await engine.start(far_flow, None, run_id="far")
    await engine.tick()
    for check in range(4):  # no worker ever answers: each recheck parks the run again
        run = await engine.get_run("far")
        assert run.status == RunStatus.SUSPENDED and run.wake_at is not None
        assert run.wake_at - clock.now() <= timedelta(seconds=10), (check, run.wake_at)
        clock.advance(10)
        await engine.tick()


# ---------------------------------------------------------------- replace, and cancel-then-start


@runlane.step(name="conf.mark")
async def mark(name: str) -> str:
    calls.hit(f"mark:{name}")
    return f"marked {name}"


@runlane.workflow(
    name="conf.replaced",
    singleton=runlane.Singleton(key=lambda i: "one-report", on_busy="replace"),
)
async def replaced(ctx: runlane.Context, name: str) -> Any:
    first = await ctx.step(held, name)
    return [first, await ctx.step(mark, name)]


async def test_a_replaced_runs_steps_never_reach_the_run_that_replaced_it(
    make_engine: Any, clock: Any
) -> None:
    calls.counts.clear()
    engine = await make_engine(replaced)
    await engine.start(replaced, "old", run_id="old")
    turn = await _while_step_runs(engine, "old", "old")
    clock.advance(0.001)
    await engine.start(replaced, "new", run_id="new")  # cancels "old", mid-step
    assert (await engine.get_run("old")).status == RunStatus.CANCELLING
    gate["new"] = asyncio.Event()
    gate["new"].set()
    gate["old"].set()  # the old step finishes; its result is discarded with its run
    await turn
    new = await settle(engine, "new")
    old = await engine.get_run("old")
    assert (old.status, old.output) == (RunStatus.CANCELLED, None)
    assert (new.status, new.output) == (RunStatus.COMPLETED, ["new done", "marked new"])
    steps = await engine.list_steps("new")
    assert [(s.seq, s.input, s.output) for s in steps] == [
        (1, "new", "new done"),
        (2, "new", "marked new"),
    ]
    assert await engine.list_steps("old") == []
    assert (calls["old"], calls["new"], calls["mark:old"], calls["mark:new"]) == (1, 1, 0, 1)


@runlane.workflow(
    name="conf.rejecting",
    singleton=runlane.Singleton(key=lambda i: "one-export", on_busy="reject"),
)
async def rejecting(ctx: runlane.Context, name: str) -> Any:
    return await ctx.step(held, name)


async def test_cancel_then_start_is_refused_while_the_cancelled_run_finishes_its_step(
    make_engine: Any,
) -> None:
    # The README's advice: cancel() returns while the run is still cancelling and holds its
    # slot, so a start in reject mode right after it is refused; on_busy="replace" is the
    # atomic alternative.
    calls.counts.clear()
    engine = await make_engine(rejecting)
    await engine.start(rejecting, "first", run_id="first")
    turn = await _while_step_runs(engine, "first", "first")
    assert await engine.cancel("first") is True
    assert (await engine.get_run("first")).holds_slot
    with pytest.raises(runlane.SingletonQueueFullError):
        await engine.start(rejecting, "second", run_id="second")
    gate["first"].set()
    await turn
    assert (await settle(engine, "first")).status == RunStatus.CANCELLED
    assert (await engine.start(rejecting, "second", run_id="second")).status == RunStatus.PENDING
