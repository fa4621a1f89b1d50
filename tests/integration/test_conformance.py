"""Behaviours users rely on, as API.md states them, on every store (the conformance issue)."""

from __future__ import annotations

import asyncio
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
