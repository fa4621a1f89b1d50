"""Fuzzing every value boundary: inputs, outputs, signal and event payloads, step results.

Whatever value is offered, the answer is the value stored exactly as a replay reads it, or a
``SerializationError`` naming where it went wrong, with nothing written; the engine keeps
running either way.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import runlane
from runlane import Engine, Run, RunStatus, SerializationError
from runlane.serialization import MAX_DEPTH, MAX_PAYLOAD_BYTES, normalise
from runlane.stores.base import Store
from runlane.testing import ManualClock

from .strategies import any_values, json_values, non_json_values

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@given(json_values)
@settings(max_examples=300, deadline=None)
def test_a_json_value_normalises_to_its_json_round_trip(value: Any) -> None:
    assert normalise(value) == json.loads(json.dumps(value))


@given(non_json_values)
@settings(max_examples=300, deadline=None)
def test_anything_else_raises_serialization_error_and_nothing_else(value: Any) -> None:
    with pytest.raises(SerializationError):
        normalise(value, "input")


def test_the_limits_are_documented_and_enforced_at_the_edge() -> None:
    documented = SerializationError.__doc__ or ""  # the reference page's text
    assert f"{MAX_DEPTH} levels" in documented
    assert f"{MAX_PAYLOAD_BYTES:,} bytes" in documented and "4 MiB" in documented
    almost = "x" * (MAX_PAYLOAD_BYTES - 2)  # with its quotes, exactly at the limit
    assert normalise(almost) == almost
    with pytest.raises(SerializationError, match="over the 4,194,304-byte limit"):
        normalise({"blob": "x" * MAX_PAYLOAD_BYTES}, "output of step 'big'")
    with pytest.raises(SerializationError, match="lone surrogate"):
        normalise({"name": "\udcff"}, "payload")


# ---------------------------------------------------------------- through the engine


@runlane.step(name="fuzz.echo")
async def echo(value: Any) -> Any:
    return value


@runlane.step(name="fuzz.produce")
async def produce(which: int) -> Any:
    return PRODUCED[which]


PRODUCED: dict[int, Any] = {}


@runlane.workflow(name="fuzz.flow")
async def flow(ctx: runlane.Context, value: Any) -> Any:
    signal = await ctx.wait_for_signal("in")
    return {"input": await ctx.step(echo, value), "signal": signal}


@runlane.workflow(name="fuzz.result")
async def result_flow(ctx: runlane.Context, which: int) -> Any:
    return await ctx.step(produce, which)


@runlane.workflow(name="fuzz.returns")
async def returns(ctx: runlane.Context, which: int) -> Any:
    return PRODUCED[which]  # the workflow's own output, no step in between


@runlane.workflow(name="fuzz.passes")
async def passes(ctx: runlane.Context, which: int) -> Any:
    return await ctx.step(echo, PRODUCED[which])  # a step input the body computed


@runlane.workflow(name="fuzz.plain")
async def plain(ctx: runlane.Context, _: Any) -> str:
    return "still running"


@pytest.fixture
def fuzz_engine(make_store: Callable[[], Store], store_kind: str) -> Iterator[tuple[Engine, Any]]:
    """One engine per test (Hypothesis runs every example on it), on its own event loop."""
    loop = asyncio.new_event_loop()
    store = make_store()
    if store_kind == "postgres":
        loop.run_until_complete(store.open())
        loop.run_until_complete(store.reset_for_tests())  # type: ignore[attr-defined]
        loop.run_until_complete(store.close())
    engine = Engine(
        store,
        workflows=[flow, result_flow, returns, passes, plain],
        clock=ManualClock(),
        drive=False,
    )
    try:
        yield engine, loop.run_until_complete
    finally:
        loop.run_until_complete(engine.drain(timeout=2))
        loop.run_until_complete(engine.store.close())
        loop.close()


async def _count(engine: Engine) -> int:
    return len(await engine.list_runs(limit=100_000))


async def _still_running(engine: Engine) -> None:
    run = await engine.start(plain, None)
    for _ in range(5):
        await engine.tick()
    done = await engine.get_run(run.id)
    assert done is not None and done.output == "still running"


@given(any_values)
@FUZZ
def test_a_start_stores_its_input_exactly_or_refuses_it_writing_nothing(
    fuzz_engine: tuple[Engine, Any], value: Any
) -> None:
    engine, run = fuzz_engine
    before = run(_count(engine))
    try:
        expected = normalise(value)
    except SerializationError:
        with pytest.raises(SerializationError):
            run(engine.start(flow, value))
        assert run(_count(engine)) == before
    else:
        started = run(engine.start(flow, value))
        stored = run(engine.get_run(started.id))
        assert stored is not None and stored.input == expected
    run(_still_running(engine))


@given(any_values)
@FUZZ
def test_signal_and_event_payloads_are_stored_exactly_or_refused(
    fuzz_engine: tuple[Engine, Any], value: Any
) -> None:
    engine, run = fuzz_engine
    target = run(engine.start(flow, 1))
    run(engine.tick())
    try:
        expected = normalise(value)
    except SerializationError:
        events = run(engine.store.latest_event_seq())
        with pytest.raises(SerializationError):
            run(engine.signal(target.id, "in", value))
        with pytest.raises(SerializationError):
            run(engine.publish_event("fuzz.event", value))
        assert run(engine.store.latest_event_seq()) == events  # no event recorded
        for _ in range(3):
            run(engine.tick())
        assert run(engine.get_run(target.id)).status == RunStatus.SUSPENDED  # nothing woke it
        # No signal was recorded either: the next one sent is the one the run receives.
        run(engine.signal(target.id, "in", "sent after"))
        for _ in range(5):
            run(engine.tick())
        done = run(engine.get_run(target.id))
        assert done is not None and done.output == {"input": 1, "signal": "sent after"}
        return
    run(engine.signal(target.id, "in", value))
    for _ in range(5):
        run(engine.tick())
    done = run(engine.get_run(target.id))
    assert done is not None and done.output == {"input": 1, "signal": expected}
    run(engine.publish_event("fuzz.event", value))


def _produced(fuzz_engine: tuple[Engine, Any], workflow: Any, value: Any) -> Run:
    """Start ``workflow`` on ``value`` (handed over by ``PRODUCED``) and tick it to its end."""
    engine, run = fuzz_engine
    which = len(PRODUCED)
    PRODUCED[which] = value
    started = run(engine.start(workflow, which))
    for _ in range(5):
        run(engine.tick())
    done: Run | None = run(engine.get_run(started.id))
    assert done is not None
    return done


@given(any_values)
@FUZZ
def test_a_step_result_is_recorded_exactly_or_fails_the_step_with_serialization_error(
    fuzz_engine: tuple[Engine, Any], value: Any
) -> None:
    engine, run = fuzz_engine
    _recorded_or_refused(_produced(fuzz_engine, result_flow, value), value)
    run(_still_running(engine))


@given(any_values)
@FUZZ
def test_a_workflow_output_is_recorded_exactly_or_fails_the_run_with_serialization_error(
    fuzz_engine: tuple[Engine, Any], value: Any
) -> None:
    engine, run = fuzz_engine
    _recorded_or_refused(_produced(fuzz_engine, returns, value), value)
    run(_still_running(engine))


@given(any_values)
@FUZZ
def test_a_step_input_is_recorded_exactly_or_fails_the_run_before_the_step_is(
    fuzz_engine: tuple[Engine, Any], value: Any
) -> None:
    engine, run = fuzz_engine
    done = _produced(fuzz_engine, passes, value)
    steps = run(engine.list_steps(done.id))
    if _recorded_or_refused(done, value):
        assert [s.input for s in steps] == [normalise(value)]
    else:
        assert steps == []  # the step was never recorded, let alone executed
    run(_still_running(engine))


def _recorded_or_refused(done: Run, value: Any) -> bool:
    """Whether ``value`` is JSON: then the run completed with it exactly; else it failed with a
    ``SerializationError`` and no output."""
    try:
        expected = normalise(value)
    except SerializationError:
        assert (done.status, done.output) == (RunStatus.FAILED, None)
        assert done.error is not None and done.error["type"] == "SerializationError"
        return False
    assert (done.status, done.output) == (RunStatus.COMPLETED, expected)
    return True
