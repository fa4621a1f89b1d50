"""Concurrency quotas: reject-fast per-key limits shared across workflows, on every store."""

from __future__ import annotations

from typing import Any

import pytest

import runlane
from runlane import ChildFailedError, Concurrency, ConcurrencyLimitError, RunStatus, Singleton

from ..helpers import settle

LIMITS = {"tenant:big": 3, "tenant:small": 1}


def tenant(i: dict[str, Any]) -> str | None:
    return f"tenant:{i['tenant']}" if i.get("tenant") else None


async def limit_for(key: str) -> int:
    return LIMITS.get(key, 2)


quota = Concurrency(key=tenant, limit=limit_for)


@runlane.workflow(name="report", concurrency=quota)
async def report(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


@runlane.workflow(name="export", concurrency=quota)
async def export(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


@runlane.workflow(
    name="parked",
    concurrency=Concurrency(key=tenant, limit=1, count_statuses=["pending", "running"]),
)
async def parked(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


async def test_each_key_gets_its_own_limit_from_the_limit_function(make_engine: Any) -> None:
    engine = await make_engine(report)
    for n in range(3):
        await engine.start(report, {"tenant": "big"}, run_id=f"big{n}")
    await engine.start(report, {"tenant": "small"}, run_id="small0")
    with pytest.raises(ConcurrencyLimitError) as info:
        await engine.start(report, {"tenant": "big"}, run_id="big3")
    error = info.value
    assert (error.workflow, error.key, error.limit, error.active) == ("report", "tenant:big", 3, 3)
    assert "tenant:big" in str(error) and error.http_status == 429
    with pytest.raises(ConcurrencyLimitError):
        await engine.start(report, {"tenant": "small"}, run_id="small1")
    assert await engine.get_run("big3") is None and await engine.get_run("small1") is None


async def test_the_key_is_shared_by_every_workflow(make_engine: Any) -> None:
    engine = await make_engine(report, export)
    await engine.start(report, {"tenant": "x"}, run_id="r1")
    await engine.start(export, {"tenant": "x"}, run_id="e1")
    with pytest.raises(ConcurrencyLimitError) as info:
        await engine.start(export, {"tenant": "x"}, run_id="e2")
    assert info.value.workflow == "export" and info.value.active == 2


async def test_a_slot_frees_the_moment_a_run_settles(make_engine: Any) -> None:
    engine = await make_engine(report)
    await engine.start(report, {"tenant": "small"}, run_id="a")
    await engine.tick()
    await engine.signal("a", "done", "ok")
    await settle(engine, "a")
    assert (await engine.start(report, {"tenant": "small"}, run_id="b")).status == RunStatus.PENDING


async def test_narrowed_count_statuses_stop_counting_runs_parked_on_a_signal(
    make_engine: Any,
) -> None:
    engine = await make_engine(parked)
    await engine.start(parked, {"tenant": "t"}, run_id="a")
    with pytest.raises(ConcurrencyLimitError):
        await engine.start(parked, {"tenant": "t"}, run_id="b")
    await engine.tick()
    assert (await engine.get_run("a")).status == RunStatus.SUSPENDED
    assert (await engine.start(parked, {"tenant": "t"}, run_id="b")).status == RunStatus.PENDING


def test_the_default_count_statuses_are_every_unfinished_status() -> None:
    default = runlane.DEFAULT_CONCURRENCY_STATUSES
    expected = {"pending", "running", "suspended", "blocked", "paused", "cancelling"}
    assert {str(s) for s in default} == expected
    assert Concurrency(key="k", limit=1).statuses == runlane.DEFAULT_CONCURRENCY_STATUSES
    narrowed = Concurrency(key="k", limit=1, count_statuses=["running"])
    assert narrowed.statuses == {RunStatus.RUNNING}


@runlane.workflow(
    name="queued-report",
    singleton=Singleton(key=lambda i: "one-at-a-time"),
    concurrency=Concurrency(key=tenant, limit=2),
)
async def queued_report(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


async def test_by_default_a_suspended_run_and_a_blocked_waiter_both_count(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(queued_report)
    await engine.start(queued_report, {"tenant": "t"}, run_id="holder")
    clock.advance(0.001)
    await engine.start(queued_report, {"tenant": "t"}, run_id="waiter")
    await engine.tick()
    statuses = [(await engine.get_run(i)).status for i in ("holder", "waiter")]
    assert statuses == [RunStatus.SUSPENDED, RunStatus.BLOCKED]
    with pytest.raises(ConcurrencyLimitError) as refused:
        await engine.start(queued_report, {"tenant": "t"}, run_id="third")
    assert refused.value.active == 2


async def test_a_none_key_is_unlimited(make_engine: Any) -> None:
    engine = await make_engine(report)
    for n in range(10):
        await engine.start(report, {"tenant": None}, run_id=f"free{n}")
    assert len(await engine.list_runs()) == 10


async def test_a_per_start_quota_replaces_the_workflow_quota(make_engine: Any) -> None:
    engine = await make_engine(report)
    override = Concurrency(key="tenant:acme", limit=1)
    await engine.start(report, {"tenant": "big"}, run_id="o1", concurrency=override)
    with pytest.raises(ConcurrencyLimitError) as info:
        await engine.start(report, {"tenant": "big"}, run_id="o2", concurrency=override)
    assert info.value.key == "tenant:acme"
    with pytest.raises(ConcurrencyLimitError):
        await engine.start(
            report, {}, run_id="z", concurrency=Concurrency(key="tenant:zero", limit=0)
        )
    for n in range(3):  # the workflow's own quota for tenant:big is untouched by the override
        await engine.start(report, {"tenant": "big"}, run_id=f"w{n}")


async def test_an_idempotent_restart_is_never_rejected(make_engine: Any) -> None:
    engine = await make_engine(report)
    await engine.start(report, {"tenant": "small"}, run_id="only")
    again = await engine.start(report, {"tenant": "small"}, run_id="only")
    assert again.id == "only"


def refusal(exc: ChildFailedError) -> dict[str, Any]:
    """What a parent saw of a child start its quota refused."""
    cause = exc.__cause__
    assert isinstance(cause, ConcurrencyLimitError)
    return {"refused": exc.child_id, "key": cause.key, "limit": cause.limit, "active": cause.active}


@runlane.workflow(name="fanout")
async def fanout(ctx: runlane.Context, _: Any) -> Any:
    await ctx.start_child(report, {"tenant": "small"}, run_id="kid-1")
    try:
        await ctx.child(report, {"tenant": "small"}, run_id="kid-2")
    except ChildFailedError as exc:
        return refusal(exc)
    return None


async def test_a_refused_child_start_fails_in_the_parent_and_can_be_caught(
    make_engine: Any,
) -> None:
    engine = await make_engine(fanout, report)
    await engine.start(fanout, None, run_id="p")
    run = await settle(engine, "p")
    assert run.output == {"refused": "kid-2", "key": "tenant:small", "limit": 1, "active": 1}
    assert await engine.get_run("kid-2") is None


@runlane.workflow(name="starts-one")
async def starts_one(ctx: runlane.Context, _: Any) -> Any:
    try:
        await ctx.start_child(report, {"tenant": "small"}, run_id="detached")
    except ChildFailedError as exc:
        return refusal(exc)
    return "started"


async def test_a_quota_refused_start_child_fails_in_the_parent_and_creates_nothing(
    make_engine: Any,
) -> None:
    engine = await make_engine(starts_one, report)
    await engine.start(report, {"tenant": "small"}, run_id="holds-the-quota")
    await engine.start(starts_one, None, run_id="p")
    run = await settle(engine, "p")
    assert run.output == {"refused": "detached", "key": "tenant:small", "limit": 1, "active": 1}
    assert await engine.get_run("detached") is None
    [record] = await engine.list_steps("p")
    assert (record.kind, record.status) == ("start_child", "failed")
    await engine.signal("holds-the-quota", "done")
    await settle(engine, "holds-the-quota")
    await engine.start(starts_one, None, run_id="p2")  # the quota has room again
    assert (await settle(engine, "p2")).output == "started"


@runlane.workflow(
    name="both",
    singleton=Singleton(key=lambda i: "lane"),
    concurrency=Concurrency(key=lambda i: "tenant:both", limit=2),
)
async def both(ctx: runlane.Context, _: Any) -> Any:
    return await ctx.wait_for_signal("done")


async def test_quota_decides_acceptance_and_singleton_decides_when_it_runs(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(both)
    await engine.start(both, None, run_id="a")
    clock.advance(0.001)
    await engine.start(both, None, run_id="b")
    with pytest.raises(ConcurrencyLimitError):
        await engine.start(both, None, run_id="c")
    await engine.tick()
    assert [(await engine.get_run(i)).holds_slot for i in "ab"] == [True, False]


@runlane.workflow(
    name="on-signup",
    on_event=("user.signed_up",),
    concurrency=Concurrency(key=lambda p: f"tenant:{p['tenant']}", limit=1),
)
async def on_signup(ctx: runlane.Context, payload: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


@runlane.workflow(name="audit", on_event=("user.signed_up",))
async def audit(ctx: runlane.Context, payload: dict[str, Any]) -> Any:
    return payload


async def test_an_event_subscriber_over_quota_is_skipped_and_the_others_start(
    make_engine: Any,
) -> None:
    engine = await make_engine(on_signup, audit)
    assert await engine.publish_event("user.signed_up", {"tenant": "t"}, id="e1") == 2
    assert await engine.publish_event("user.signed_up", {"tenant": "t"}, id="e2") == 1
    assert await engine.get_run("on-signup:event:e2") is None
    assert (await engine.get_run("audit:event:e2")).status == RunStatus.PENDING
