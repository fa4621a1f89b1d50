"""Failure handlers on every store: a failed or dead run starts its handler in the write that
settles it; the handler starts like any run (quotas, singletons), and a cancelled run starts none."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import Concurrency, RemoteWorkflow, RunStatus, Singleton
from runlane.models import RetryTimer
from runlane.transports import InProcessTransport

from ..helpers import settle

LEASE = 10.0
NO_WAIT = RetryTimer(0.0, 0.0)
engines: dict[str, Any] = {}  # the engine a step of the test needs to reach


@pytest.fixture(autouse=True)
def no_engine() -> None:
    engines.clear()


@runlane.workflow(name="alert")
async def alert(ctx: runlane.Context, info: dict[str, Any]) -> str:
    return f"alerted about {info['run_id']}"


@runlane.workflow(name="bury")
async def bury(ctx: runlane.Context, info: dict[str, Any]) -> str:
    return f"buried {info['run_id']}"


@runlane.workflow(name="order", on_failure=alert, dead_letter="bury")
async def order(ctx: runlane.Context, input: dict[str, Any]) -> str:
    await ctx.sleep(5)  # a turn that dies here is recovered, or declared dead
    raise ValueError(f"order {input['id']} is broken")


@runlane.workflow(name="fragile", on_failure="alert")
async def fragile(ctx: runlane.Context, input: Any) -> None:
    await ctx.sleep(5)


@runlane.step(name="cancel-own-run")
async def cancel_own_run(run_id: str) -> None:
    await engines["engine"].cancel(run_id)


@runlane.workflow(name="waits", on_failure=alert)
async def waits(ctx: runlane.Context, cancel_itself: bool) -> None:
    if cancel_itself:
        await ctx.step(cancel_own_run, ctx.run_id)
    else:
        await ctx.wait_for_signal("go")
    raise ValueError("failed after its cancel")


@runlane.workflow(name="page", concurrency=Concurrency(key="pager", limit=1))
async def page(ctx: runlane.Context, info: Any) -> str:
    await ctx.wait_for_signal("ack")
    return "paged"


@runlane.workflow(name="paged-order", on_failure=page)
async def paged_order(ctx: runlane.Context, input: Any) -> None:
    raise ValueError("broken")


@runlane.workflow(name="triage", singleton=Singleton(key=lambda info: "oncall"))
async def triage(ctx: runlane.Context, info: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return str(info["run_id"])


@runlane.workflow(name="triaged-order", on_failure=triage)
async def triaged_order(ctx: runlane.Context, input: Any) -> None:
    raise ValueError("broken")


@runlane.workflow(name="sole", singleton=Singleton(key=lambda info: "sole", on_busy="reject"))
async def sole(ctx: runlane.Context, info: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return str(info["run_id"])


@runlane.workflow(name="sole-order", on_failure=sole)
async def sole_order(ctx: runlane.Context, input: Any) -> None:
    raise ValueError("broken")


@runlane.workflow(name="picky", singleton=Singleton(key=lambda info: info["input"]["lane"]))
async def picky(ctx: runlane.Context, info: Any) -> None:
    return None


@runlane.workflow(name="picky-order", on_failure=picky)
async def picky_order(ctx: runlane.Context, input: Any) -> None:
    raise ValueError("broken")


@runlane.workflow(name="flaky-alert", on_failure=alert)
async def flaky_alert(ctx: runlane.Context, info: Any) -> None:
    raise RuntimeError(f"could not alert about {info['run_id']}")


@runlane.workflow(name="alerted-badly", on_failure=flaky_alert)
async def alerted_badly(ctx: runlane.Context, input: Any) -> None:
    raise ValueError("broken")


ALL = (order, fragile, alert, bury, waits)


async def failed(engine: Any, clock: Any, run_id: str) -> Any:
    """Tick the run (its sleep included) until it settles."""
    await engine.tick()
    clock.advance(5)
    return await settle(engine, run_id)


async def keep_dying(
    make_engine: Any,
    clock: Any,
    workflow: Any,
    run_id: str,
    *,
    limit: int,
    turns: int,
    **options: Any,
) -> Any:
    """An engine (``max_recovery_attempts=limit``) and a run of ``workflow`` claimed ``turns``
    times for turns that die: each lease expires unreleased."""
    engine = await make_engine(*ALL, max_recovery_attempts=limit, lease=LEASE, **options)
    await engine.start(workflow, {"id": run_id}, run_id=run_id)
    for n in range(turns):
        now = clock.now()
        until = now + timedelta(seconds=LEASE)
        await engine.store.claim_run(run_id, f"dying:{n}", now, until, singleton_retry=NO_WAIT)
        clock.advance(LEASE + 1)
    return engine


async def test_a_failed_run_starts_its_on_failure_handler_with_what_happened(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(*ALL)
    await engine.start(order, {"id": 7}, run_id="o7")
    run = await failed(engine, clock, "o7")
    assert (run.status, run.failures) == (RunStatus.FAILED, 1)
    handler = await settle(engine, "o7.failure.1")
    assert (handler.workflow, handler.status) == ("alert", RunStatus.COMPLETED)
    assert handler.input == {
        "run_id": "o7",
        "workflow": "order",
        "input": {"id": 7},
        "error": run.error,
        "status": "failed",
    }
    assert handler.output == "alerted about o7"
    assert run.error["type"] == "ValueError"


async def test_a_run_whose_turns_keep_dying_is_declared_dead_and_its_dead_letter_runs(
    make_engine: Any, clock: Any
) -> None:
    engine = await keep_dying(make_engine, clock, order, "o1", limit=1, turns=2)
    await engine.recover_incomplete()
    run = await engine.get_run("o1")
    assert (run.status, run.recoveries, run.failures) == (RunStatus.DEAD, 2, 1)
    assert run.error["type"] == "RecoveryLimitExceeded"
    handler = await settle(engine, "o1.failure.1")
    assert (handler.workflow, handler.status) == ("bury", RunStatus.COMPLETED)
    assert handler.input["status"] == "dead" and handler.input["error"] == run.error


async def test_a_dead_run_without_a_dead_letter_starts_its_on_failure_handler(
    make_engine: Any, clock: Any
) -> None:
    engine = await keep_dying(make_engine, clock, fragile, "f", limit=0, turns=1)
    await engine.recover_incomplete()
    assert (await engine.get_run("f")).status == RunStatus.DEAD
    handler = await settle(engine, "f.failure.1")
    assert (handler.workflow, handler.input["status"]) == ("alert", "dead")


async def test_a_dead_remote_run_starts_the_dead_letter_its_declaration_names(
    make_engine: Any, clock: Any
) -> None:
    """The engine lacks the remote workflow's code: it settles the dead run itself, with the
    handler its declaration names (no worker is involved)."""
    declared = RemoteWorkflow("remote-order", group="wf", on_failure="alert", dead_letter="bury")
    engine = await keep_dying(
        make_engine,
        clock,
        "remote-order",
        "r1",
        limit=0,
        turns=1,
        remote_workflows=[declared],
        transport=InProcessTransport(),
    )
    await engine.recover_incomplete()
    run = await engine.get_run("r1")
    assert (run.status, run.failures) == (RunStatus.DEAD, 1)
    handler = await settle(engine, "r1.failure.1")
    assert (handler.workflow, handler.status) == ("bury", RunStatus.COMPLETED)
    assert handler.input["workflow"] == "remote-order" and handler.input["status"] == "dead"


async def test_a_dying_run_whose_engine_died_before_settling_it_is_declared_dead_once(
    make_engine: Any, clock: Any
) -> None:
    engine = await keep_dying(make_engine, clock, order, "o2", limit=0, turns=1)
    now = clock.now()
    dying = await engine.store.claim_run(
        "o2",
        "crashes:1",
        now,
        now + timedelta(seconds=LEASE),
        singleton_retry=NO_WAIT,
        max_recoveries=0,
        dead_letters={"order"},
    )
    assert dying.dying and (await engine.get_run("o2")).status == RunStatus.RUNNING
    clock.advance(LEASE + 1)
    await engine.tick()
    run = await engine.get_run("o2")
    assert (run.status, run.recoveries, run.failures) == (RunStatus.DEAD, 2, 1)
    await settle(engine, "o2.failure.1")
    assert [r.id for r in await engine.list_runs(workflow="bury")] == ["o2.failure.1"]


async def test_a_requeued_run_that_fails_again_starts_a_second_handler(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(*ALL)
    await engine.start(order, {"id": 3}, run_id="o3")
    await failed(engine, clock, "o3")
    await settle(engine, "o3.failure.1")
    await engine.requeue("o3")
    run = await failed(engine, clock, "o3")
    assert (run.status, run.failures) == (RunStatus.FAILED, 2)
    second = await settle(engine, "o3.failure.2")
    assert (second.status, second.input["run_id"]) == (RunStatus.COMPLETED, "o3")
    alerts = sorted(r.id for r in await engine.list_runs(workflow="alert"))
    assert alerts == ["o3.failure.1", "o3.failure.2"]


async def test_a_cancelled_run_starts_no_handler_even_when_its_body_then_fails(
    make_engine: Any,
) -> None:
    engine = engines["engine"] = await make_engine(*ALL)
    await engine.start(waits, False, run_id="waiting")
    await engine.start(waits, True, run_id="running")
    await engine.tick()
    assert await engine.cancel("waiting")
    for run_id in ("waiting", "running"):
        assert (await settle(engine, run_id)).status == RunStatus.CANCELLED
    await engine.tick()
    assert await engine.list_runs(workflow="alert") == []
    assert [(await engine.get_run(r)).failures for r in ("waiting", "running")] == [0, 0]


async def test_a_handler_refused_by_its_quota_is_recorded_on_the_failed_run(
    make_engine: Any,
) -> None:
    engine = await make_engine(paged_order, page)
    await engine.start(page, None, run_id="busy")
    await engine.start(paged_order, None, run_id="p")
    waiter = asyncio.create_task(engine.wait_for_run("p", timeout=10))
    await asyncio.sleep(0)
    run = await settle(engine, "p")
    assert await waiter == run  # the settling turn's own view says what the store says
    assert (run.status, run.failures) == (RunStatus.FAILED, 1)
    assert run.error is not None
    refusal = run.error["handler_error"]
    assert refusal["type"] == "ConcurrencyLimitError"
    assert refusal["attrs"] == {"workflow": "page", "key": "pager", "limit": 1, "active": 1}
    assert run.error["type"] == "ValueError"
    assert await engine.get_run("p.failure.1") is None
    await engine.signal("busy", "ack")
    await settle(engine, "busy")
    await engine.requeue("p")
    assert (await settle(engine, "p")).failures == 2
    assert (await engine.get_run("p.failure.2")).status == RunStatus.SUSPENDED


async def test_a_handler_refused_by_its_singleton_backlog_is_recorded_on_the_failed_run(
    make_engine: Any,
) -> None:
    engine = await make_engine(sole_order, sole)
    await engine.start(sole_order, None, run_id="s1")
    await settle(engine, "s1")
    await engine.tick()
    holder = await engine.get_run("s1.failure.1")
    assert holder is not None and holder.status == RunStatus.SUSPENDED
    await engine.start(sole_order, None, run_id="s2")
    run = await settle(engine, "s2")
    assert (run.status, run.failures) == (RunStatus.FAILED, 1)
    assert run.error is not None and run.error["type"] == "ValueError"
    assert run.error["handler_error"]["type"] == "SingletonQueueFullError"
    assert await engine.get_run("s2.failure.1") is None


async def test_a_handler_that_cannot_be_started_is_recorded_and_the_run_still_fails(
    make_engine: Any,
) -> None:
    engine = await make_engine(picky_order, picky)
    await engine.start(picky_order, {"no": "lane"}, run_id="p")
    run = await settle(engine, "p")
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["handler_error"]["type"] == "KeyFunctionError"
    assert run.error["handler_error"]["attrs"]["gate"] == "singleton"
    assert await engine.get_run("p.failure.1") is None


async def test_a_singleton_handler_waits_its_turn_behind_the_one_running(
    make_engine: Any,
) -> None:
    engine = await make_engine(triaged_order, triage)
    for run_id in ("t1", "t2"):
        await engine.start(triaged_order, None, run_id=run_id)
        await settle(engine, run_id)
    await engine.tick()
    first, second = [await engine.get_run(f"{r}.failure.1") for r in ("t1", "t2")]
    assert first.status == RunStatus.SUSPENDED and first.holds_slot
    assert second.status in (RunStatus.PENDING, RunStatus.BLOCKED) and not second.holds_slot
    await engine.signal("t1.failure.1", "done")
    assert (await settle(engine, "t1.failure.1")).output == "t1"
    await engine.tick()
    assert (await engine.get_run("t2.failure.1")).holds_slot
    await engine.signal("t2.failure.1", "done")
    assert (await settle(engine, "t2.failure.1")).output == "t2"


async def test_a_failed_handler_starts_the_handler_its_own_workflow_names(
    make_engine: Any,
) -> None:
    engine = await make_engine(alerted_badly, flaky_alert, alert)
    await engine.start(alerted_badly, None, run_id="b")
    await settle(engine, "b")
    assert (await settle(engine, "b.failure.1")).status == RunStatus.FAILED
    last = await settle(engine, "b.failure.1.failure.1")
    assert (last.workflow, last.input["workflow"]) == ("alert", "flaky-alert")
