"""Gate paths on every store: racing replace starts, signal_with_start against the gates, a sync
quota limit function, and a store that cannot admit atomically."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import runlane
from runlane import (
    Concurrency,
    ConcurrencyLimitError,
    Engine,
    RunStatus,
    Singleton,
    SingletonQueueFullError,
    UnsupportedStoreError,
)
from runlane.stores import MemoryStore

from ..helpers import settle

# Fresh per test: an asyncio.Event binds to the first event loop that waits on it.
events: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def fresh_events() -> None:
    events.update(in_step=asyncio.Event(), may_go=asyncio.Event())


def by_store(i: dict[str, Any]) -> str:
    return f"store:{i['store']}"


@runlane.step(name="gates.hold")
async def hold(block: bool) -> None:
    if block:
        events["in_step"].set()
        await events["may_go"].wait()


@runlane.workflow(name="gates.newest", singleton=Singleton(key=by_store, on_busy="replace"))
async def newest(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    await ctx.step(hold, bool(i.get("block")))
    return await ctx.wait_for_signal("done")


@runlane.workflow(name="gates.keep", singleton=Singleton(key=by_store, on_busy="reject"))
async def keep(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


@runlane.workflow(name="gates.lane", singleton=Singleton(key=by_store))
async def lane(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


@runlane.workflow(
    name="gates.tenant", concurrency=Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=1)
)
async def tenant_run(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


async def status_of(engine: Engine, run_id: str) -> RunStatus:
    run = await engine.get_run(run_id)
    assert run is not None, f"run {run_id} does not exist"
    return run.status


async def test_two_racing_replace_starts_leave_exactly_one_live_run_and_it_executes(
    make_engine: Any, store_kind: str
) -> None:
    first = await make_engine(newest)
    # Memory stores are per object; the other backends get a second connection, as a second
    # instance would have.
    second = await make_engine(newest, share_store=store_kind == "memory")
    await first.start(newest, {"store": "A", "block": True}, run_id="old")
    holder_turn = asyncio.create_task(first.tick())
    await asyncio.wait_for(events["in_step"].wait(), 10)
    await asyncio.gather(
        first.start(newest, {"store": "A"}, run_id="new-1"),
        second.start(newest, {"store": "A"}, run_id="new-2"),
    )
    racers = {run_id: await status_of(first, run_id) for run_id in ("new-1", "new-2")}
    [survivor] = [run_id for run_id, status in racers.items() if not status.is_terminal]
    [loser] = [run_id for run_id, status in racers.items() if status == RunStatus.CANCELLED]
    assert await status_of(first, "old") == RunStatus.CANCELLING  # its turn is still in a step
    events["may_go"].set()
    await holder_turn
    assert await status_of(first, "old") == RunStatus.CANCELLED
    await second.tick()
    live = [r for r in await first.list_runs() if not r.is_terminal]
    assert [(r.id, r.status, r.holds_slot) for r in live] == [(survivor, RunStatus.SUSPENDED, True)]
    await second.signal(survivor, "done", "ran")
    assert (await settle(second, survivor)).output == "ran"
    assert await status_of(first, loser) == RunStatus.CANCELLED


async def test_signal_with_start_is_refused_by_a_busy_reject_key_and_creates_nothing(
    make_engine: Any,
) -> None:
    engine = await make_engine(keep)
    await engine.start(keep, {"store": "A"}, run_id="holder")
    await engine.tick()
    with pytest.raises(SingletonQueueFullError) as info:
        await engine.signal_with_start(keep, {"store": "A"}, "second", "done", "for second")
    assert info.value.key == "store:A"
    assert await engine.get_run("second") is None
    await engine.tick()
    holder = await engine.get_run("holder")
    assert holder is not None and (holder.status, holder.holds_slot) == (RunStatus.SUSPENDED, True)


async def test_signal_with_start_queues_behind_the_holder_and_buffers_the_signal_for_it(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(lane)
    await engine.start(lane, {"store": "A"}, run_id="holder")
    await engine.tick()
    clock.advance(0.001)
    waiter = await engine.signal_with_start(lane, {"store": "A"}, "waiter", "done", "buffered")
    assert not waiter.is_terminal
    await engine.tick()
    parked = await engine.get_run("waiter")
    assert parked is not None and not parked.holds_slot and not parked.is_terminal
    assert await engine.list_steps("waiter") == []  # its body has not run: it waits its turn
    await engine.signal("holder", "done", "released")
    assert (await settle(engine, "holder")).output == "released"
    assert (await settle(engine, "waiter")).output == "buffered"


async def test_signal_with_start_over_quota_is_refused_and_stores_no_signal(
    make_engine: Any,
) -> None:
    engine = await make_engine(tenant_run)
    await engine.start(tenant_run, {"tenant": "t"}, run_id="first")
    with pytest.raises(ConcurrencyLimitError) as info:
        await engine.signal_with_start(tenant_run, {"tenant": "t"}, "second", "done", "lost?")
    assert (info.value.key, info.value.limit, info.value.active) == ("tenant:t", 1, 1)
    assert await engine.get_run("second") is None
    await engine.signal("first", "done", "first done")
    assert (await settle(engine, "first")).output == "first done"
    # Started now, the same id finds no signal stored by the refused call: it waits for one.
    await engine.start(tenant_run, {"tenant": "t"}, run_id="second")
    await engine.tick()
    assert await status_of(engine, "second") == RunStatus.SUSPENDED
    assert [s.status for s in await engine.list_steps("second")] == ["pending"]


def limit_of(key: str) -> int:
    return {"tenant:big": 2}.get(key, 1)


@runlane.workflow(
    name="gates.sync-limit",
    concurrency=Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=limit_of),
)
async def sync_limited(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("done")


async def test_a_sync_limit_function_sets_each_keys_quota(make_engine: Any) -> None:
    engine = await make_engine(sync_limited)
    for tenant, limit in (("big", 2), ("small", 1)):
        for n in range(limit):
            await engine.start(sync_limited, {"tenant": tenant}, run_id=f"{tenant}{n}")
        with pytest.raises(ConcurrencyLimitError) as refused:
            await engine.start(sync_limited, {"tenant": tenant}, run_id=f"{tenant}-over")
        error = refused.value
        assert (error.key, error.limit, error.active) == (f"tenant:{tenant}", limit, limit)
        assert await engine.get_run(f"{tenant}-over") is None


class NonAtomicStore:
    """A store that cannot admit atomically: every call goes to a real MemoryStore."""

    atomic_admission = False

    def __init__(self) -> None:
        self.inner = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@runlane.workflow(name="gates.ungated")
async def ungated(ctx: runlane.Context, i: Any) -> Any:
    return i


async def test_a_store_without_atomic_admission_refuses_gated_starts_before_creating_them(
    clock: Any,
) -> None:
    store = NonAtomicStore()
    engine = Engine(store, workflows=[keep, tenant_run, ungated], clock=clock, drive=False)
    with pytest.raises(UnsupportedStoreError, match="NonAtomicStore"):
        await engine.start(keep, {"store": "A"}, run_id="singleton")
    with pytest.raises(UnsupportedStoreError):
        await engine.start(tenant_run, {"tenant": "t"}, run_id="quota")
    with pytest.raises(UnsupportedStoreError):
        await engine.start(
            ungated, 1, run_id="per-start", concurrency=Concurrency(key="tenant:t", limit=5)
        )
    assert await store.inner.list_runs(limit=10) == []
    await engine.start(ungated, "plain", run_id="plain")
    assert [r.id for r in await store.inner.list_runs(limit=10)] == ["plain"]
    assert (await settle(engine, "plain")).output == "plain"


@runlane.workflow(
    name="gates.keyed-everywhere",
    concurrency=Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=5),
    rate_limit=runlane.RateLimit(10, 60, key=lambda i: i["team"]),
    debounce=runlane.Debounce(key=lambda i: str(i["doc"]), period=5),
)
async def keyed_everywhere(ctx: runlane.Context, i: dict[str, Any]) -> None:
    return None


@runlane.workflow(name="gates.no-key", singleton=Singleton(key=lambda i: i.get("store") or ""))
async def no_key(ctx: runlane.Context, i: dict[str, Any]) -> None:
    return None


@pytest.mark.parametrize(
    ("workflow", "input", "gate", "reason"),
    [
        (lane, {"shop": "A"}, "singleton", "KeyError: 'store'"),
        (lane, None, "singleton", "TypeError: 'NoneType' object is not subscriptable"),
        (keyed_everywhere, {"team": "t", "doc": 1}, "concurrency", "KeyError: 'tenant'"),
        (keyed_everywhere, {"tenant": "a", "doc": 1}, "rate limit", "KeyError: 'team'"),
        (keyed_everywhere, {"tenant": "a", "team": "t"}, "debounce", "KeyError: 'doc'"),
        (no_key, {}, "singleton", "the key must be a non-empty string, got ''"),
    ],
)
async def test_a_gate_key_function_that_fails_on_the_input_raises_a_typed_error_writing_nothing(
    make_engine: Any, workflow: Any, input: Any, gate: str, reason: str
) -> None:
    engine: Engine = await make_engine(lane, keyed_everywhere, no_key)
    name = runlane.definitions.workflow_definition(workflow).name
    with pytest.raises(runlane.KeyFunctionError) as raised:
        await engine.start(workflow, input, "r1")
    error = raised.value
    assert isinstance(error, ValueError)
    assert (error.workflow, error.gate, error.reason) == (name, gate, reason)
    assert name in str(error) and reason in str(error)
    assert await engine.get_run("r1") is None
