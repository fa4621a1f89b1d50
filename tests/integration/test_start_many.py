"""``Engine.start_many`` on every store: each start admitted as ``start`` would admit it, in the
batch's order, a refused one reported as its own outcome without failing the others."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

import runlane
from runlane import (
    Concurrency,
    ConcurrencyLimitError,
    Debounce,
    Engine,
    RateLimit,
    RateLimitError,
    RunExistsError,
    RunNotFoundError,
    RunStatus,
    SerializationError,
    Singleton,
    SingletonQueueFullError,
    Start,
    StartOutcome,
    UnknownWorkflowError,
)
from runlane.stores import MemoryStore

from ..helpers import settle


@runlane.workflow(name="many.plain")
async def plain(ctx: runlane.Context, i: Any) -> Any:
    return i


@runlane.workflow(
    name="many.tenant", concurrency=Concurrency(key=lambda i: f"tenant:{i['t']}", limit=2)
)
async def tenant(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(
    name="many.lane", singleton=Singleton(key=lambda i: f"k{i['k']}", max_queue_depth=2)
)
async def lane(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return i["n"]


@runlane.workflow(
    name="many.held", singleton=Singleton(key=lambda i: f"k{i['k']}", max_queue_depth=2)
)
async def held(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("go")


@runlane.workflow(name="many.rated", rate_limit=RateLimit(key=lambda i: "r", limit=2, period=60))
async def rated(ctx: runlane.Context, i: Any) -> Any:
    return None


@runlane.workflow(name="many.folded", debounce=Debounce(key=lambda i: "d", period=5))
async def folded(ctx: runlane.Context, i: Any) -> Any:
    return i


@runlane.workflow(name="many.newest", singleton=Singleton(key=lambda i: "n", on_busy="replace"))
async def newest(ctx: runlane.Context, i: Any) -> Any:
    return i


WORKFLOWS = (plain, tenant, lane, held, rated, folded, newest)


async def test_a_mixed_batch_refuses_only_the_start_over_its_quota(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS)
    outcomes = await engine.start_many(
        [
            Start(tenant, {"t": "acme"}, run_id="a1"),
            Start(plain, 1, run_id="p1"),
            Start(tenant, {"t": "acme"}, run_id="a2"),
            Start(tenant, {"t": "acme"}, run_id="a3"),
            Start(tenant, {"t": "globex"}, run_id="g1"),
        ]
    )
    assert [o.ok for o in outcomes] == [True, True, True, False, True]
    assert [o.run.id for o in outcomes if o.run] == ["a1", "p1", "a2", "g1"]
    assert all(o.created for o in outcomes if o.ok)
    refused = outcomes[3].error
    assert isinstance(refused, ConcurrencyLimitError)
    assert (refused.key, refused.limit, refused.active) == ("tenant:acme", 2, 2)
    with pytest.raises(ConcurrencyLimitError):
        outcomes[3].result()
    assert await engine.get_run("a3") is None
    assert (await settle(engine, "p1")).output == 1


async def test_a_full_singleton_backlog_refuses_the_starts_past_it_in_order(
    make_engine: Any,
) -> None:
    engine = await make_engine(*WORKFLOWS)
    outcomes = await engine.start_many([Start(lane, {"k": 1, "n": n}) for n in range(5)])
    assert [o.ok for o in outcomes] == [True, True, True, False, False]
    assert all(isinstance(o.error, SingletonQueueFullError) for o in outcomes[3:])
    holder, *waiters = [o.result() for o in outcomes[:3]]
    assert holder.status == RunStatus.PENDING
    assert [w.status for w in waiters] == [RunStatus.BLOCKED, RunStatus.BLOCKED]


async def test_runs_of_one_key_keep_the_batch_order(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS)
    # Ids that sort against the batch's order: the lane's order must still be the batch's.
    ids = [f"z{9 - n}" for n in range(3)]
    outcomes = await engine.start_many(
        [Start(lane, {"k": 2, "n": n}, run_id=run_id) for n, run_id in enumerate(ids)]
    )
    runs = [o.result() for o in outcomes]
    assert [r.created_at for r in runs] == sorted(r.created_at for r in runs)
    assert len({r.created_at for r in runs}) == 3
    finished = []
    for _ in range(30):
        await engine.tick()
        engine.clock.advance(2)
        done = [r for r in [await engine.get_run(i) for i in ids] if r and r.is_terminal]
        finished = sorted(done, key=lambda r: r.updated_at)
        if len(finished) == 3:
            break
    assert [r.output for r in finished] == [0, 1, 2]


async def test_a_repeated_id_in_one_batch_creates_one_run(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS)
    first, again, refused = await engine.start_many(
        [
            Start(plain, 1, run_id="same"),
            Start(plain, 2, run_id="same"),
            Start(plain, 3, run_id="same", if_exists="fail"),
        ]
    )
    assert first.created and first.result().input == 1
    assert again.ok and not again.created and again.result().input == 1
    assert isinstance(refused.error, RunExistsError) and refused.run is not None
    gated = await engine.start_many(
        [Start(tenant, {"t": "x"}, run_id="t-same"), Start(tenant, {"t": "x"}, run_id="t-same")]
    )
    assert [(o.ok, o.created) for o in gated] == [(True, True), (True, False)]


async def test_an_existing_id_is_returned_or_refused_as_start_would(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS)
    await engine.start(tenant, {"t": "acme"}, run_id="old")
    await engine.start(tenant, {"t": "acme"}, run_id="old2")
    kept, failed = await engine.start_many(
        [
            Start(tenant, {"t": "acme"}, run_id="old"),  # over quota, but it exists: returned
            Start(tenant, {"t": "acme"}, run_id="old2", if_exists="fail"),
        ]
    )
    assert kept.ok and not kept.created and kept.result().id == "old"
    assert isinstance(failed.error, RunExistsError) and failed.error.run_id == "old2"


async def test_invalid_starts_are_their_own_errors_and_nothing_of_them_is_written(
    make_engine: Any,
) -> None:
    engine = await make_engine(*WORKFLOWS)
    outcomes = await engine.start_many(
        [
            Start("no-such-workflow", 1, run_id="u"),
            Start(plain, {1, 2}, run_id="s"),  # a set is not JSON
            Start(plain, 1, run_id="t", execution_timeout=-1),
            Start(plain, 1, run_id="ok", tags=("x",), attributes={"customer": "acme"}),
            Start(lane, {"nokey": 1}, run_id="k"),
        ]
    )
    errors = [type(o.error) for o in outcomes]
    assert errors[:3] == [UnknownWorkflowError, SerializationError, ValueError]
    assert outcomes[3].ok and outcomes[3].result().attributes == {"customer": "acme"}
    assert "x" in outcomes[3].result().tags
    assert isinstance(outcomes[4].error, runlane.KeyFunctionError)
    for run_id in ("u", "s", "t", "k"):
        assert await engine.get_run(run_id) is None


async def test_a_list_of_anything_but_starts_is_refused_before_anything_is_written(
    make_engine: Any,
) -> None:
    engine = await make_engine(*WORKFLOWS)
    with pytest.raises(TypeError):
        await engine.start_many([Start(plain, 1, run_id="a"), ("many.plain", 2)])
    with pytest.raises(TypeError):
        await engine.start_many(Start(plain, 1, run_id="a"))
    assert await engine.get_run("a") is None
    assert await engine.start_many([]) == []


async def test_a_replacing_start_in_a_batch_cancels_the_ones_before_it(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS)
    outcomes = await engine.start_many([Start(newest, n, run_id=f"n{n}") for n in range(3)])
    assert all(o.created for o in outcomes)
    statuses = [(await engine.get_run(f"n{n}")).status for n in range(3)]
    assert statuses == [RunStatus.CANCELLED, RunStatus.CANCELLED, RunStatus.PENDING]
    assert (await settle(engine, "n2")).output == 2


async def test_rate_limits_and_debounce_apply_within_the_batch(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS)
    outcomes = await engine.start_many([Start(rated, n) for n in range(3)])
    assert [o.ok for o in outcomes] == [True, True, False]
    assert isinstance(outcomes[2].error, RateLimitError)
    first, second = await engine.start_many([Start(folded, 1), Start(folded, 2)])
    assert first.created and second.ok and not second.created
    assert second.result().id == first.result().id and second.result().input == 2


async def test_options_reach_each_run(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS)
    [run] = [
        o.result()
        for o in await engine.start_many(
            [
                Start(
                    tenant,
                    {"t": "acme"},
                    run_id="opts",
                    concurrency=Concurrency(key="own", limit=5),
                    priority=7,
                    execution_timeout=60,
                )
            ]
        )
    ]
    assert (run.priority, run.concurrency_key) == (7, "own")
    assert run.deadline_at is not None
    assert (run.deadline_at - run.created_at).total_seconds() == pytest.approx(60)


async def test_a_batch_of_a_scoped_engine_refuses_another_namespaces_id(
    make_engine: Any,
) -> None:
    eu = await make_engine(*WORKFLOWS, namespace="eu", scope_reads=True)
    us = await make_engine(*WORKFLOWS, namespace="us", scope_reads=True)
    await us.start(plain, 1, run_id="theirs")
    theirs, mine = await eu.start_many([Start(plain, 2, run_id="theirs"), Start(plain, 3)])
    assert isinstance(theirs.error, RunNotFoundError)
    assert mine.ok and mine.result().namespace == "eu"


async def test_racing_batches_on_shared_keys_never_overshoot_a_quota(
    make_engine: Any, store_kind: str
) -> None:
    # Two engines on one backend (their own store objects where the store allows it), each
    # sending batches that cross the same quota keys in opposite orders.
    engines = [
        await make_engine(*WORKFLOWS),
        await make_engine(*WORKFLOWS, share_store=store_kind == "memory"),
    ]
    tenants = ["a", "b", "c"]

    def batch(engine_n: int, round_n: int) -> list[Start]:
        order = tenants if engine_n == 0 else tenants[::-1]
        ids = (f"{engine_n}-{round_n}-{i}" for i in range(6))
        return [Start(tenant, {"t": t}, run_id=i) for t, i in zip(order * 2, ids, strict=True)]

    results = await asyncio.gather(
        *(e.start_many(batch(n, r)) for r in range(3) for n, e in enumerate(engines))
    )
    created = [o.result() for outcomes in results for o in outcomes if o.created]
    per_tenant = Counter(run.concurrency_key for run in created)
    assert per_tenant == {"tenant:a": 2, "tenant:b": 2, "tenant:c": 2}
    refusals = [o.error for outcomes in results for o in outcomes if not o.ok]
    assert all(isinstance(e, ConcurrencyLimitError) for e in refusals) and len(refusals) == 30


async def test_a_batch_across_keys_admits_each_start_as_its_own_start_would(
    make_engine: Any,
) -> None:
    # No two gated starts share a key (PostgreSQL sends them as one statement): each meets
    # what is already on its key, as a start of its own would.
    engine = await make_engine(*WORKFLOWS)
    await engine.start(held, {"k": "held", "n": 0})
    for n in range(3):
        await engine.start(held, {"k": "full", "n": n})
    for _ in range(2):
        await engine.start(tenant, {"t": "busy"})
    await engine.start(held, {"k": "old", "n": 0}, run_id="old")
    engine.clock.advance(1)  # the batch's runs come after those (ties go by id)
    outcomes = await engine.start_many(
        [
            Start(held, {"k": "held", "n": 1}),
            Start(held, {"k": "full", "n": 3}),
            Start(tenant, {"t": "busy"}),
            Start(lane, {"k": "free", "n": 0}),
            Start(plain, 1),
            Start(tenant, {"t": "idle"}),
            Start(held, {"k": "old", "n": 1}, run_id="old"),
        ]
    )
    parked, full, busy, free, alone, idle, old = outcomes
    assert parked.created and parked.result().status == RunStatus.BLOCKED  # behind its key
    assert isinstance(full.error, SingletonQueueFullError) and full.error.key == "kfull"
    assert isinstance(busy.error, ConcurrencyLimitError) and busy.error.active == 2
    assert [o.result().status for o in (free, alone, idle)] == [RunStatus.PENDING] * 3
    assert old.ok and not old.created and old.result().input == {"k": "old", "n": 0}
    assert len(await engine.list_runs(limit=100)) == 7 + 4  # the runs before, four new
    assert (await settle(engine, free.result().id)).output == 0
    assert (await settle(engine, alone.result().id)).output == 1


async def test_racing_batches_across_keys_never_overshoot_a_quota(
    make_engine: Any, store_kind: str
) -> None:
    # Each batch holds every tenant once (its keys all apart), the two engines' batches in
    # opposite orders: each tenant gets its two runs, every other start is refused.
    engines = [
        await make_engine(*WORKFLOWS),
        await make_engine(*WORKFLOWS, share_store=store_kind == "memory"),
    ]
    tenants = ["a", "b", "c", "d"]

    def batch(engine_n: int, round_n: int) -> list[Start]:
        order = tenants if engine_n == 0 else tenants[::-1]
        return [Start(tenant, {"t": t}, run_id=f"{engine_n}-{round_n}-{t}") for t in order]

    results = await asyncio.gather(
        *(e.start_many(batch(n, r)) for r in range(4) for n, e in enumerate(engines))
    )
    created = [o.result() for outcomes in results for o in outcomes if o.created]
    assert Counter(run.concurrency_key for run in created) == {f"tenant:{t}": 2 for t in tenants}
    refusals = [o.error for outcomes in results for o in outcomes if not o.ok]
    assert all(isinstance(e, ConcurrencyLimitError) for e in refusals) and len(refusals) == 24


async def test_the_runs_of_a_batch_execute(make_engine: Any) -> None:
    engine = await make_engine(*WORKFLOWS)
    outcomes = await engine.start_many([Start(plain, n, run_id=f"r{n}") for n in range(20)])
    for n in range(20):
        assert (await settle(engine, f"r{n}")).output == n
    assert engine.stats is not None and all(o.created for o in outcomes)


async def test_a_long_list_is_written_in_slices_and_answered_in_order() -> None:
    engine = Engine(MemoryStore(), workflows=[plain], drive=False)
    async with engine:
        outcomes = await engine.start_many([Start(plain, n) for n in range(2500)])
    assert [o.result().input for o in outcomes] == list(range(2500))


def test_an_outcome_is_its_run_or_its_error() -> None:
    error = RunExistsError("r", RunStatus.PENDING)
    assert not StartOutcome(None, error).ok
    with pytest.raises(RunExistsError):
        StartOutcome(None, error).result()
