"""Fuzzing the flow-control definitions: ``StepQueue``, ``RateLimit`` and ``Debounce`` take any
value for any field and either build a definition every store can keep and every clock
computation can use, or raise ``DefinitionError``: never another exception, at definition time
or later (found: an infinite or huge period, or a limit past a PostgreSQL integer, was accepted
and failed at the first start or at the engine's open)."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runlane
from runlane import Debounce, DefinitionError, Engine, RateLimit, RateLimitError, StepQueue
from runlane.admission import debounce_begin, window_opens
from runlane.definitions import MAX_LIMIT, MAX_PERIOD, MIN_PERIOD
from runlane.models import DebounceGate, RateGate
from runlane.step_queues import window_start
from runlane.testing import ManualClock

NOW = ManualClock().now()

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([0, 1, MAX_LIMIT, MAX_LIMIT + 1, 2**63, 10**400, -1]),
    st.floats(),  # NaN and both infinities included
    st.sampled_from([MIN_PERIOD, MIN_PERIOD / 2, MAX_PERIOD, MAX_PERIOD * 2, 1e-300, 1e300]),
    st.timedeltas(),
    st.text(max_size=5),
    st.sampled_from(["reject", "delay", "fifo", "lifo", "key", "q\x00", ""]),
    st.lists(st.integers(), max_size=2),
    st.just(lambda i: "k"),
    st.builds(object),
)


def _usable_rate(rate: RateLimit) -> None:
    """What the engine and the stores compute from a rate limit, a year on from now."""
    assert not isinstance(rate.limit, bool) and 1 <= rate.limit <= MAX_LIMIT
    period = float(rate.period)  # type: ignore[arg-type]
    assert math.isfinite(period) and MIN_PERIOD <= period <= MAX_PERIOD
    gate = RateGate("lane", rate.limit, period, rate.on_limit == "delay", None)
    window_opens(gate, NOW + timedelta(days=365))
    window_start(NOW, period) + timedelta(seconds=period)


@settings(max_examples=400, deadline=None)
@given(limit=anything, period=anything, key=anything, on_limit=anything)
def test_a_rate_limit_is_usable_or_refused(
    limit: Any, period: Any, key: Any, on_limit: Any
) -> None:
    try:
        rate = RateLimit(limit, period, key=key, on_limit=on_limit)
    except DefinitionError:
        return
    _usable_rate(rate)


@settings(max_examples=400, deadline=None)
@given(key=anything, period=anything, max_wait=anything)
def test_a_debounce_is_usable_or_refused(key: Any, period: Any, max_wait: Any) -> None:
    try:
        debounce = Debounce(key, period, max_wait=max_wait)
    except DefinitionError:
        return
    seconds = float(debounce.period)  # type: ignore[arg-type]
    assert MIN_PERIOD <= seconds <= MAX_PERIOD
    wait = None if debounce.max_wait is None else float(debounce.max_wait)  # type: ignore[arg-type]
    assert wait is None or seconds <= wait <= MAX_PERIOD
    debounce_begin(DebounceGate("lane", seconds, wait), NOW + timedelta(days=365), NOW)


@settings(max_examples=400, deadline=None)
@given(
    name=anything,
    concurrency=anything,
    rate=st.one_of(anything, st.builds(RateLimit, st.integers(1, 5), st.floats(0.5, 60))),
    fairness=anything,
    order=anything,
)
def test_a_step_queue_is_usable_or_refused(
    name: Any, concurrency: Any, rate: Any, fairness: Any, order: Any
) -> None:
    try:
        queue = StepQueue(
            name, concurrency=concurrency, rate_limit=rate, fairness=fairness, order=order
        )
    except DefinitionError:
        return
    assert isinstance(queue.name, str) and queue.name and "\x00" not in queue.name
    assert queue.concurrency is None or 1 <= queue.concurrency <= MAX_LIMIT
    if queue.rate_limit is not None:
        _usable_rate(queue.rate_limit)
    queue.settings()


@pytest.mark.parametrize(
    "build",
    [
        lambda: RateLimit(1, math.inf),
        lambda: RateLimit(1, 10**400),
        lambda: RateLimit(1, MAX_PERIOD * 2),
        lambda: RateLimit(1, MIN_PERIOD / 2),
        lambda: RateLimit(MAX_LIMIT + 1, 60),
        lambda: Debounce(None, 1e15),
        lambda: Debounce(None, 5, max_wait=math.inf),
        lambda: StepQueue("q", concurrency=MAX_LIMIT + 1),
        lambda: StepQueue("q\x00", concurrency=1),
    ],
)
def test_the_values_fuzzing_found_are_refused_at_definition(build: Any) -> None:
    with pytest.raises(DefinitionError):
        build()


async def test_the_largest_limits_and_periods_work_on_every_store(
    make_engine: Any, clock: ManualClock
) -> None:
    """The extremes a definition accepts are kept and computed with by every store."""
    edge = StepQueue("edge", concurrency=MAX_LIMIT, rate_limit=RateLimit(MAX_LIMIT, MAX_PERIOD))

    @runlane.step(name="edge.step", queue="edge")
    async def admitted(x: int) -> int:
        return x

    @runlane.workflow(name="edge.limited", rate_limit=RateLimit(1, MAX_PERIOD))
    async def limited(ctx: runlane.Context, x: int) -> int:
        return int(await ctx.step(admitted, x))

    @runlane.workflow(
        name="edge.throttled", rate_limit=RateLimit(MAX_LIMIT, MAX_PERIOD, on_limit="delay")
    )
    async def throttled(ctx: runlane.Context, x: int) -> int:
        return x

    @runlane.workflow(name="edge.held", rate_limit=RateLimit(1, MAX_PERIOD, on_limit="delay"))
    async def held(ctx: runlane.Context, x: int) -> int:
        return x

    @runlane.workflow(name="edge.debounced", debounce=Debounce(None, MAX_PERIOD, MAX_PERIOD))
    async def debounced(ctx: runlane.Context, x: int) -> int:
        return x

    engine: Engine = await make_engine(limited, throttled, held, debounced, queues=[edge])
    async with engine:
        run = await engine.start(limited, 7)
        with pytest.raises(RateLimitError) as refused:
            await engine.start(limited, 8)
        assert refused.value.retry_after == pytest.approx(MAX_PERIOD)
        await engine.start(throttled, 1)
        first, later = await engine.start(held, 1), await engine.start(held, 2)
        assert later.begin_at == first.created_at + timedelta(seconds=MAX_PERIOD)
        one = await engine.start(debounced, 1)
        assert (await engine.start(debounced, 2)).id == one.id
        for _ in range(3):
            await engine.tick()
        done = await engine.store.get_run(run.id)
        assert done is not None and done.output == 7
