"""Run attributes on every store: given at the start, set by the body, recorded in the history
(a replay writes nothing again), fenced like any turn write, and what listings filter on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import runlane
from runlane import Engine, Run, RunStatus, SerializationError
from tests.helpers import Calls, settle
from tests.outages import FlakyStore, When

calls = Calls()


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    calls.counts.clear()


@runlane.step(name="attributes.noop")
def noop(x: Any) -> Any:
    calls.hit("noop")
    return x


@runlane.workflow(name="attributes.plain")
async def plain(ctx: runlane.Context, _: Any) -> str:
    return "done"


@runlane.workflow(name="attributes.stages")
async def stages(ctx: runlane.Context, order: dict[str, Any]) -> str:
    ctx.set_attributes({"customer": order["customer"], "stage": "received"})
    await ctx.step(noop, 1)  # the attributes are written before the step starts
    await ctx.wait_for_signal("paid")
    ctx.set_attributes({"stage": "paid", "amount": order["amount"]})
    await ctx.sleep(10)
    ctx.set_attributes({"stage": "shipped"})  # written with the settlement
    return "done"


async def _through(make_engine: Callable[..., Any], *workflows: Any) -> tuple[Engine, FlakyStore]:
    """An engine whose store calls are counted (and can be cut: ``FlakyStore.fail``)."""
    plain_engine = await make_engine(*workflows)
    store = FlakyStore(plain_engine.store)
    engine = await make_engine(*workflows, share_store=False, steps=[noop])
    engine.store = store
    engine._execution.leases._store = store
    return engine, store


async def run_of(engine: Engine, run_id: str) -> Run:
    run = await engine.get_run(run_id)
    assert run is not None, run_id
    return run


async def ids(engine: Engine, **attributes: Any) -> list[str]:
    return [run.id for run in await engine.list_runs(attributes=attributes)]


# ---------------------------------------------------------------- at the start


async def test_a_start_indexes_its_run_by_the_attributes_given(make_engine: Any) -> None:
    engine = await make_engine(plain)
    run = await engine.start(plain, None, "a", attributes={"customer": "acme", "tier": 2})
    assert run.attributes == {"customer": "acme", "tier": 2}
    await engine.start(plain, None, "b", attributes={"customer": "acme", "tier": "2"})
    await engine.signal_with_start(
        plain, None, "c", "go", attributes={"customer": "globex", "vip": True}
    )
    assert (await engine.start(plain, None, "none")).attributes == {}
    assert await ids(engine, customer="acme") == ["b", "a"]
    assert await ids(engine, customer="acme", tier=2) == ["a"]
    assert await ids(engine, tier=2.0) == ["a"]
    assert await ids(engine, tier="2") == ["b"]
    assert await ids(engine, vip=True) == ["c"]
    assert await ids(engine, vip=1) == []
    assert await ids(engine, customer="initech") == []
    assert [r.id for r in await engine.list_runs(attributes={"customer": "acme"}, limit=1)] == ["b"]
    assert [r.id for r in await engine.list_runs(workflow=plain, attributes={})] == [
        "none",
        "c",
        "b",
        "a",
    ]


async def test_a_start_finding_its_run_returns_it_with_its_own_attributes(
    make_engine: Any,
) -> None:
    engine = await make_engine(plain)
    await engine.start(plain, None, "a", attributes={"customer": "acme"})
    again = await engine.start(plain, None, "a", attributes={"customer": "globex"})
    assert again.attributes == {"customer": "acme"}
    assert await ids(engine, customer="globex") == []


@pytest.mark.parametrize(
    ("attributes", "names"),
    [
        ({"tags": ["a", "b"]}, "a list"),
        ({"nothing": None}, "a NoneType"),
        ({"nested": {"a": 1}}, "a dict"),
        ({1: "x"}, "key 1"),
        ({"": "x"}, "key ''"),
        ({"nan": float("nan")}, "nan"),
        ({"big": 2**63}, "64-bit"),
        ({"nul": "a\x00b"}, "NUL"),
        ({"k\x00": "v"}, "NUL"),
        ([("k", "v")], "a mapping"),
    ],
)
async def test_bad_attributes_are_refused_before_anything_is_written(
    make_engine: Any, attributes: Any, names: str
) -> None:
    engine = await make_engine(plain)
    with pytest.raises(SerializationError, match=names):
        await engine.start(plain, None, "a", attributes=attributes)
    assert await engine.get_run("a") is None
    with pytest.raises(SerializationError, match=names):
        await engine.list_runs(attributes=attributes)


async def test_attribute_values_of_subclassed_types_are_stored_as_plain_values(
    make_engine: Any,
) -> None:
    import enum

    class Tier(enum.StrEnum):
        GOLD = "gold"

    class Level(enum.IntEnum):
        HIGH = 3

    engine = await make_engine(plain)
    run = await engine.start(plain, None, "a", attributes={"tier": Tier.GOLD, "level": Level.HIGH})
    stored = (await engine.get_run("a")).attributes
    assert run.attributes == stored == {"tier": "gold", "level": 3}
    assert type(stored["tier"]) is str and type(stored["level"]) is int
    assert await ids(engine, tier="gold", level=3) == ["a"]


# ---------------------------------------------------------------- set by the body


async def test_the_body_sets_attributes_once_as_it_goes_and_a_replay_writes_none(
    make_engine: Any, clock: Any
) -> None:
    engine, store = await _through(make_engine, stages)
    await engine.start(stages, {"customer": "acme", "amount": 12.5}, "order-1")
    await engine.tick()
    run = await run_of(engine, "order-1")
    assert run.status == RunStatus.SUSPENDED and calls["noop"] == 1
    assert run.attributes == {"customer": "acme", "stage": "received"}
    assert await ids(engine, stage="received") == ["order-1"]
    assert store.calls["set_attributes"] == 1

    await engine.signal("order-1", "paid")
    await engine.tick()  # replays the first set (recorded: written again by nobody)
    assert (await run_of(engine, "order-1")).attributes["stage"] == "paid"
    assert await ids(engine, stage="received") == []
    assert await ids(engine, stage="paid", amount=12.5) == ["order-1"]
    assert store.calls["set_attributes"] == 2

    clock.advance(10)
    run = await settle(engine, "order-1")
    assert run.status == RunStatus.COMPLETED and calls["noop"] == 1
    assert run.attributes == {
        "customer": "acme",
        "stage": "shipped",
        "amount": 12.5,
    }
    assert store.calls["set_attributes"] == 3
    history = [(s.kind, s.output) for s in await engine.list_steps("order-1")]
    assert [output for kind, output in history if kind == "attributes"] == [
        {"customer": "acme", "stage": "received"},
        {"stage": "paid", "amount": 12.5},
        {"stage": "shipped"},
    ]


found_while_running: list[list[str]] = []


@runlane.step(name="attributes.look")
async def look(customer: str) -> None:
    found_while_running.append(await ids(looking_engine[0], customer=customer))


looking_engine: list[Engine] = []


@runlane.workflow(name="attributes.awaited")
async def awaited(ctx: runlane.Context, customer: str) -> str:
    await ctx.set_attributes({"customer": customer})
    ctx.now()  # staged after the write above; goes with the step's checkpoint
    await ctx.step(look, customer)
    return "done"


async def test_an_awaited_set_is_written_before_the_call_returns(make_engine: Any) -> None:
    engine = await make_engine(awaited, steps=[look])
    looking_engine[:] = [engine]
    found_while_running.clear()
    await engine.start(awaited, "acme", "a")
    assert (await settle(engine, "a")).attributes == {"customer": "acme"}
    assert found_while_running == [["a"]]
    assert [s.kind for s in await engine.list_steps("a")] == ["attributes", "now", "step"]


@runlane.workflow(name="attributes.queued")
async def queued(ctx: runlane.Context, customer: str) -> str:
    ctx.set_attributes({"customer": customer})  # goes with the queue's admission write
    await ctx.step(look, customer, queue="attributes-q")
    return "done"


async def test_attributes_set_before_a_queued_step_are_written_before_it_starts(
    make_engine: Any,
) -> None:
    slots = runlane.StepQueue("attributes-q", concurrency=1)
    engine = await make_engine(queued, steps=[look], queues=[slots])
    looking_engine[:] = [engine]
    found_while_running.clear()
    await engine.start(queued, "acme", "a")
    assert (await settle(engine, "a")).status == RunStatus.COMPLETED
    assert found_while_running == [["a"]]


@runlane.workflow(name="attributes.last")
async def last(ctx: runlane.Context, outcome: str) -> str:
    ctx.set_attributes({"outcome": outcome})
    if outcome == "failed":
        raise ValueError("boom")
    if outcome == "continued":
        ctx.continue_as_new("done")
    if outcome == "waiting":
        await ctx.wait_for_signal("never")
    return outcome


@pytest.mark.parametrize("outcome", ["done", "failed", "waiting"])
async def test_attributes_set_last_go_with_the_write_that_ends_the_turn(
    make_engine: Any, outcome: str
) -> None:
    engine = await make_engine(last)
    await engine.start(last, outcome, "a")
    await engine.tick()
    run = await engine.get_run("a")
    assert run.attributes == {"outcome": outcome}, run
    assert await ids(engine, outcome=outcome) == ["a"]


async def test_a_continuation_keeps_the_attributes_of_the_run_it_continues(
    make_engine: Any,
) -> None:
    engine = await make_engine(last)
    await engine.start(last, "continued", "a", attributes={"customer": "acme"})
    await settle(engine, "a")
    continued = await settle(engine, "a~1")
    assert continued.attributes == {"customer": "acme", "outcome": "done"}
    assert await ids(engine, customer="acme") == ["a~1", "a"]


@runlane.workflow(name="attributes.bad")
async def bad(ctx: runlane.Context, _: Any) -> str:
    ctx.set_attributes({"when": ctx.now()})  # type: ignore[dict-item]  # not an attribute
    return "unreachable"


async def test_a_body_setting_a_bad_attribute_fails_its_run(make_engine: Any) -> None:
    engine = await make_engine(bad)
    await engine.start(bad, None, "a")
    run = await settle(engine, "a")
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["type"] == "SerializationError"
    assert run.attributes == {}


cancel_from_step: list[Engine] = []


@runlane.step(name="attributes.cancel_own_run")
async def cancel_own_run(run_id: str) -> None:
    await cancel_from_step[0].cancel(run_id)


@runlane.workflow(name="attributes.cancelled")
async def cancelled(ctx: runlane.Context, _: Any) -> str:
    await ctx.step(cancel_own_run, ctx.run_id)
    await ctx.set_attributes({"after": "cancel"})
    return "unreachable"


async def test_a_cancelled_run_writes_no_attribute_its_body_sets_after(make_engine: Any) -> None:
    engine = await make_engine(cancelled, steps=[cancel_own_run])
    cancel_from_step[:] = [engine]
    await engine.start(cancelled, None, "a", attributes={"before": "cancel"})
    run = await settle(engine, "a")
    assert run.status == RunStatus.CANCELLED
    assert run.attributes == {"before": "cancel"}
    assert "attributes" not in [s.kind for s in await engine.list_steps("a")]


@pytest.mark.parametrize(("when", "writes"), [("before", 2), ("after", 1)])
async def test_an_outage_on_the_attributes_write_is_given_back_and_replayed(
    make_engine: Any, when: When, writes: int
) -> None:
    # The turn gives the run back without the record: when the write did not go through, the
    # next turn sets the attributes again; when it did ("after": the caller could not know),
    # the next turn finds the record and writes them no more. Never half of the write.
    engine, store = await _through(make_engine, stages)
    store.fail("set_attributes", when=when)
    await engine.start(stages, {"customer": "acme", "amount": 1}, "a")
    await engine.tick()  # gives the run back, due at once
    written = {"customer": "acme", "stage": "received"} if when == "after" else {}
    assert (await run_of(engine, "a")).attributes == written and calls["noop"] == 0
    await engine.tick()
    run = await run_of(engine, "a")
    assert run.status == RunStatus.SUSPENDED and calls["noop"] == 1, run
    assert run.attributes == {"customer": "acme", "stage": "received"}
    assert [(s.seq, s.kind) for s in await engine.list_steps("a")][:2] == [
        (1, "attributes"),
        (2, "step"),
    ]
    assert store.calls["set_attributes"] == writes
