"""Namespaces on one store, on every store: shared by default, fenced with ``scope_reads``.

Two engines fenced to their namespaces (``eu`` and ``us``) and one unscoped engine share a
store: the same singleton key, quota key, rate limit and debounce are a lane of each
namespace's own, reads see only the engine's namespace, and every operation on another
namespace's run is ``RunNotFoundError``. Unscoped engines share keys across namespaces.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import runlane
from runlane import (
    Concurrency,
    ConcurrencyLimitError,
    Debounce,
    DefinitionError,
    Engine,
    RateLimit,
    RateLimitError,
    RunNotFoundError,
    RunStatus,
    Schedule,
    Singleton,
    SingletonQueueFullError,
)
from runlane.admission import key_scope
from runlane.lanes import AllLanes, all_lanes
from runlane.models import RunQuery
from runlane.stores import MemoryStore
from runlane.testing import ManualClock

from ..helpers import settle


@runlane.workflow(name="sync", singleton=Singleton(key=lambda i: f"store:{i['store']}"))
async def sync(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="report", concurrency=Concurrency(key="api", limit=1))
async def report(ctx: runlane.Context, input: Any) -> Any:
    if await ctx.wait_for_signal("go") == "fail":
        raise runlane.FatalError("asked to fail")
    return "done"


@runlane.workflow(name="alert", rate_limit=RateLimit(limit=1, period=60, key=lambda i: i["team"]))
async def alert(ctx: runlane.Context, input: dict[str, Any]) -> str:
    return "sent"


@runlane.workflow(name="refresh", debounce=Debounce(key=lambda i: i["page"], period=30))
async def refresh(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    return input


@runlane.workflow(name="parent")
async def parent(ctx: runlane.Context, input: Any) -> Any:
    return await ctx.child(report, None, run_id=f"{ctx.run_id}.child")


@runlane.workflow(name="rounds", singleton=Singleton(key=lambda i: "rounds"))
async def rounds(ctx: runlane.Context, input: int) -> Any:
    if input < 1:
        ctx.continue_as_new(input + 1)
    return await ctx.wait_for_signal("go")


WORKFLOWS = (sync, report, alert, refresh, parent, rounds)


async def three(make_engine: Any) -> tuple[Engine, Engine, Engine]:
    """Engines fenced to ``eu`` and to ``us``, and one without a namespace, on one store."""
    eu = await make_engine(*WORKFLOWS, namespace="eu", scope_reads=True)
    us = await make_engine(*WORKFLOWS, namespace="us", scope_reads=True)
    shared = await make_engine(*WORKFLOWS)
    return eu, us, shared


async def started(engine: Engine, workflow: Any, input: Any, run_id: str) -> runlane.Run:
    """Start a run and give it its first turn on its own engine (an engine without a namespace
    would claim every namespace's pending runs)."""
    await engine.start(workflow, input, run_id)
    await engine.tick()
    run = await engine.get_run(run_id)
    assert run is not None
    return run


async def lanes_of(engine: Engine) -> AllLanes:
    now = engine.now()
    return await engine.read(lambda store: all_lanes(store, now))


def test_scope_reads_without_a_namespace_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match="namespace"):
        Engine(MemoryStore(), scope_reads=True)
    with pytest.raises(DefinitionError, match="namespace"):
        Engine(MemoryStore(), namespace="", scope_reads=True)
    assert Engine(MemoryStore(), namespace="eu", scope_reads=True).scope_reads
    assert not Engine(MemoryStore(), namespace="eu").scope_reads


async def test_one_singleton_key_is_a_lane_of_each_scoped_namespace(make_engine: Any) -> None:
    eu, us, shared = await three(make_engine)
    holders = [
        await started(eu, sync, {"store": "A"}, "e1"),
        await started(us, sync, {"store": "A"}, "u1"),
        await started(shared, sync, {"store": "A"}, "n1"),
    ]
    assert [r.status for r in holders] == [RunStatus.SUSPENDED] * 3
    assert all("singleton:store:A" in r.tags for r in holders)
    waiter = await started(eu, sync, {"store": "A"}, "e2")
    assert waiter.status == RunStatus.BLOCKED  # behind e1 only

    [lane] = (await lanes_of(eu)).lanes
    assert (lane.key, lane.namespace, lane.tag) == ("store:A", "eu", "singleton:store:A")
    assert ([r.run_id for r in lane.holders], [r.run_id for r in lane.waiters]) == (["e1"], ["e2"])
    [lane] = (await lanes_of(us)).lanes
    assert ([r.run_id for r in lane.holders], lane.waiters) == (["u1"], ())
    # The unscoped engine's reads are shared: it sees every lane, each one's namespace told.
    seen = {
        (x.namespace, x.key, tuple(r.run_id for r in x.holders))
        for x in (await lanes_of(shared)).lanes
    }
    assert seen == {
        ("eu", "store:A", ("e1",)),
        ("us", "store:A", ("u1",)),
        (None, "store:A", ("n1",)),
    }

    await eu.signal("e1", "go")
    assert (await settle(eu, "e1")).status == RunStatus.COMPLETED
    await eu.tick()
    assert (await eu.get_run("e2")).status == RunStatus.SUSPENDED  # type: ignore[union-attr]


async def test_one_quota_key_counts_each_scoped_namespace_apart(make_engine: Any) -> None:
    eu, us, shared = await three(make_engine)
    await started(eu, report, None, "e1")
    await started(us, report, None, "u1")
    await started(shared, report, None, "n1")
    with pytest.raises(ConcurrencyLimitError) as refused:
        await eu.start(report, None, "e2")
    assert (refused.value.key, refused.value.limit, refused.value.active) == ("api", 1, 1)
    assert "concurrency:api" in (await eu.get_run("e1")).tags  # type: ignore[union-attr]
    [lane] = (await lanes_of(us)).lanes
    assert (lane.kind, lane.key, lane.namespace) == ("concurrency", "api", "us")
    assert [r.run_id for r in lane.holders] == ["u1"]
    assert {x.namespace for x in (await lanes_of(shared)).lanes} == {"eu", "us", None}


async def test_a_requeue_counts_the_run_again_under_its_namespace_quota(make_engine: Any) -> None:
    eu, us, _ = await three(make_engine)
    await started(eu, report, None, "e1")
    await eu.signal("e1", "go", "fail")
    assert (await settle(eu, "e1")).status == RunStatus.FAILED
    await started(eu, report, None, "e2")  # takes eu's slot of the quota back
    await started(us, report, None, "u1")
    with pytest.raises(ConcurrencyLimitError) as refused:
        await eu.requeue("e1")
    assert refused.value.key == "api"
    assert await us.cancel("u1")  # freeing us's slot frees nothing of eu's
    with pytest.raises(ConcurrencyLimitError):
        await eu.requeue("e1")
    assert await eu.cancel("e2")
    requeued = await eu.requeue("e1")
    assert requeued.status == RunStatus.PENDING and "concurrency:api" in requeued.tags
    with pytest.raises(ConcurrencyLimitError):  # counted again, still in eu's own quota
        await eu.start(report, None, "e3")
    await started(us, report, None, "u2")


async def test_rate_limits_and_debounces_are_each_scoped_namespace_s_own(
    make_engine: Any,
) -> None:
    eu, us, _ = await three(make_engine)
    await eu.start(alert, {"team": "ops"}, "e1")
    await us.start(alert, {"team": "ops"}, "u1")
    with pytest.raises(RateLimitError) as refused:
        await eu.start(alert, {"team": "ops"}, "e2")
    assert refused.value.key == "ops"
    await eu.start(refresh, {"page": "home"}, "e-home")
    us_run = await us.start(refresh, {"page": "home"}, "u-home")
    assert us_run.id == "u-home"  # not folded into eu's held run
    folded = await eu.start(refresh, {"page": "home", "again": True}, "e-home-2")
    assert folded.id == "e-home"
    found = await lanes_of(eu)
    assert [(r.key, r.namespace, [x.id for x in r.counted]) for r in found.rates] == [
        ("ops", "eu", ["e1"])
    ]
    assert [(d.key, d.namespace, d.run.id) for d in found.debounces] == [("home", "eu", "e-home")]


async def test_children_and_continuations_keep_their_namespace_and_its_keys(
    make_engine: Any,
) -> None:
    eu, us, _ = await three(make_engine)
    await started(us, report, None, "u1")  # us's slot of "api" is taken: eu's is free
    await started(eu, parent, None, "p")
    await eu.tick()
    child = await eu.get_run("p.child")
    assert child is not None and (child.namespace, child.status) == ("eu", RunStatus.SUSPENDED)
    assert child.concurrency_key is not None and key_scope(child.concurrency_key) == ("eu", "api")
    await started(eu, rounds, 0, "r")
    await eu.tick()
    continued = await eu.get_run("r~1")
    assert continued is not None and continued.namespace == "eu"
    assert continued.status == RunStatus.SUSPENDED  # holds eu's own "rounds" lane
    assert continued.singleton_key is not None
    assert key_scope(continued.singleton_key)[0] == "eu"
    await started(us, rounds, 1, "ur")  # us's "rounds" lane is free
    assert (await us.get_run("ur")).status == RunStatus.SUSPENDED  # type: ignore[union-attr]


async def test_reads_see_only_the_engine_namespace(make_engine: Any) -> None:
    eu, us, shared = await three(make_engine)
    await started(eu, sync, {"store": "A"}, "e1")
    await started(us, sync, {"store": "B"}, "u1")
    await started(shared, report, None, "n1")
    assert await eu.get_run("u1") is None and await eu.get_run("n1") is None
    assert [r.id for r in await eu.list_runs()] == ["e1"]
    assert await eu.list_steps("u1") == [] and await us.list_steps("u1") != []
    assert {r.namespace for r in await shared.list_runs()} == {None, "us", "eu"}
    assert await eu.read(lambda s: s.page_runs(RunQuery(), 10)) == await eu.list_runs()
    assert await eu.read(lambda s: s.page_runs(RunQuery(namespace="us"), 10)) == []
    assert await eu.read(lambda s: s.count_runs(RunQuery())) == {RunStatus.SUSPENDED: 1}
    assert await us.read(lambda s: s.active_run_counts()) == {("sync", RunStatus.SUSPENDED): 1}
    assert await eu.read(lambda s: s.active_code_counts()) == {("sync", "1"): 1}
    assert await eu.read(lambda s: s.list_signals("u1")) == []
    assert await shared.read(lambda s: s.count_runs(RunQuery(namespace="us"))) == {
        RunStatus.SUSPENDED: 1
    }
    with pytest.raises(RunNotFoundError):
        await eu.wait_for_run("u1", timeout=1)


async def test_every_operation_on_another_namespace_run_is_not_found(make_engine: Any) -> None:
    eu, us, _ = await three(make_engine)
    await started(us, sync, {"store": "A"}, "u1")
    await started(us, report, None, "u2")
    await us.signal("u2", "go", "fail")
    assert (await settle(us, "u2")).status == RunStatus.FAILED
    operations: dict[str, Callable[[], Awaitable[Any]]] = {
        "signal": lambda: eu.signal("u1", "go", 1),
        "update": lambda: eu.update("u1", "ask", 1, timeout=1),
        "cancel": lambda: eu.cancel("u1"),
        "requeue": lambda: eu.requeue("u2"),
        "start": lambda: eu.start(sync, {"store": "A"}, "u1"),
        "signal_with_start": lambda: eu.signal_with_start(sync, {"store": "A"}, "u1", "go", 1),
    }
    for name, operation in operations.items():
        with pytest.raises(RunNotFoundError) as missing:
            await operation()
        assert missing.value.run_id in ("u1", "u2"), name
    assert await eu.cancel("nowhere") is False  # an unknown id is as without a namespace
    await us.tick()
    assert (await us.get_run("u1")).status == RunStatus.SUSPENDED  # type: ignore[union-attr]
    assert (await us.get_run("u2")).status == RunStatus.FAILED  # type: ignore[union-attr]
    await us.signal("u1", "go", "from us")
    assert (await settle(us, "u1")).output == "from us"  # eu's signal was never delivered


async def test_an_unscoped_store_shares_a_key_across_namespaces(make_engine: Any) -> None:
    eu = await make_engine(*WORKFLOWS, namespace="eu")
    us = await make_engine(*WORKFLOWS, namespace="us")
    await started(eu, sync, {"store": "A"}, "e1")
    waiter = await started(us, sync, {"store": "A"}, "u1")
    assert waiter.status == RunStatus.BLOCKED  # behind eu's run: one lane for both
    await started(eu, report, None, "e2")
    with pytest.raises(ConcurrencyLimitError) as refused:
        await us.start(report, None, "u2")
    assert (refused.value.key, refused.value.active) == ("api", 1)
    [lane, quota] = (await lanes_of(us)).lanes
    assert (lane.namespace, [r.run_id for r in lane.holders], [r.run_id for r in lane.waiters]) == (
        None,
        ["e1"],
        ["u1"],
    )
    assert (quota.namespace, [r.run_id for r in quota.holders]) == (None, ["e2"])
    # Reads are shared too: either engine reads and acts on the other's runs.
    assert (await us.get_run("e1")).namespace == "eu"
    await us.signal("e1", "go", 1)
    await eu.tick()
    await us.tick()
    assert (await eu.get_run("u1")).status == RunStatus.SUSPENDED


async def test_a_scoped_and_an_unscoped_engine_of_one_namespace_share_no_key(
    make_engine: Any,
) -> None:
    fenced = await make_engine(*WORKFLOWS, namespace="eu", scope_reads=True)
    open_ = await make_engine(*WORKFLOWS, namespace="eu")
    await started(fenced, sync, {"store": "A"}, "f1")
    assert (await started(open_, sync, {"store": "A"}, "o1")).status == RunStatus.SUSPENDED
    await started(fenced, report, None, "f2")
    await started(open_, report, None, "o2")


async def test_a_quota_key_that_reads_as_a_namespace_key_is_refused(make_engine: Any) -> None:
    engine = await make_engine(report)
    with pytest.raises(runlane.KeyFunctionError, match="reserved"):
        await engine.start(report, None, "r", concurrency=Concurrency(key="~2:eu:api", limit=1))
    assert await engine.get_run("r") is None


async def test_a_continuation_keeps_its_run_namespace_on_an_engine_without_one(
    make_engine: Any,
) -> None:
    producer = await make_engine(rounds, namespace="eu")
    executor = await make_engine(rounds)  # executes every namespace's runs
    await producer.start(rounds, 0, "c")
    await executor.tick()
    continued = await executor.get_run("c~1")
    assert continued is not None and continued.namespace == "eu"


async def test_a_schedule_overlap_lane_stays_the_schedule_s_across_namespaces(
    make_engine: Any, clock: ManualClock
) -> None:
    eu, us, _ = await three(make_engine)
    await eu.schedules.upsert(Schedule("nightly", "report", every=3600, overlap="skip"))
    first = await eu.schedules.trigger("nightly")
    await eu.tick()
    assert (await eu.get_run(first.id)).status == RunStatus.SUSPENDED  # type: ignore[union-attr]
    clock.advance(1)  # a manual run's id names its instant
    with pytest.raises(SingletonQueueFullError) as refused:
        await us.schedules.trigger("nightly")  # the schedule's run of eu is still active
    assert refused.value.key == "schedule:nightly"
    await eu.signal(first.id, "go")
    await settle(eu, first.id)
    second = await us.schedules.trigger("nightly")
    assert second.namespace == "us" and "concurrency:api" in second.tags  # us's own quota
