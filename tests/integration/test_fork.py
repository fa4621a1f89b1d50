"""Forks on every store: a new run that reuses another run's recorded results before a sequence
number, never executing them again, admitted like a start; the original is untouched.

The engines are driven by hand (``tick``) on a manual clock."""

from __future__ import annotations

from typing import Any

import pytest

import runlane
from runlane import (
    Concurrency,
    ConcurrencyLimitError,
    RunExistsError,
    RunNotFoundError,
    RunStatus,
    Singleton,
    SingletonQueueFullError,
)

from ..helpers import Calls, settle

calls = Calls()
broken = {"charge": True}


@pytest.fixture(autouse=True)
def fresh() -> None:
    calls.counts.clear()
    broken["charge"] = True


@runlane.step(name="fork.reserve")
async def reserve(order: str) -> str:
    calls.hit("reserve")
    return f"reserved {order}"


@runlane.step(name="fork.charge", retry=runlane.Retry(max_attempts=1))
async def charge(order: str) -> str:
    calls.hit("charge")
    if broken["charge"]:
        raise RuntimeError("the payment code has a bug")
    return f"charged {order}"


@runlane.workflow(name="fork.order")
async def order(ctx: runlane.Context, name: str) -> list[str]:
    reserved = await ctx.step(reserve, name)
    said = await ctx.wait_for_signal("confirm")
    charged = await ctx.step(charge, name)
    return [reserved, said, charged]


@runlane.workflow(
    name="fork.keyed",
    singleton=Singleton(key=lambda i: "one", max_queue_depth=0),
    concurrency=Concurrency(key=lambda i: "tenant", limit=2),
)
async def keyed(ctx: runlane.Context, _: Any) -> str:
    await ctx.step(reserve, "k")
    await ctx.wait_for_signal("go")
    return "ok"


async def failed_order(engine: Any) -> None:
    await engine.start(order, "o1", run_id="o1")
    await engine.tick()
    await engine.signal("o1", "confirm", "yes")
    run = await settle(engine, "o1")
    assert run.status == RunStatus.FAILED
    assert (calls["reserve"], calls["charge"]) == (1, 1)


async def test_a_fork_of_a_failed_run_reuses_what_went_well_and_runs_the_rest(
    make_engine: Any,
) -> None:
    engine = await make_engine(order)
    await failed_order(engine)
    broken["charge"] = False  # the fix is deployed
    fork = await engine.fork("o1")
    assert fork.id == "o1.fork.1" and fork.forked_from == ("o1", 3)
    assert fork.status == RunStatus.PENDING
    done = await settle(engine, fork.id)
    assert (done.status, done.output) == (RunStatus.COMPLETED, ["reserved o1", "yes", "charged o1"])
    assert (calls["reserve"], calls["charge"]) == (1, 2)  # the reserve step ran once, ever
    original = await engine.get_run("o1")
    assert original.status == RunStatus.FAILED  # untouched
    assert [s.seq for s in await engine.list_steps("o1")] == [1, 2, 3]


async def test_forks_get_the_next_free_id_and_a_chosen_one_is_idempotent(
    make_engine: Any,
) -> None:
    engine = await make_engine(order)
    await failed_order(engine)
    assert (await engine.fork("o1")).id == "o1.fork.1"
    assert (await engine.fork("o1")).id == "o1.fork.2"
    chosen = await engine.fork("o1", run_id="retry-o1")
    assert (await engine.fork("o1", run_id="retry-o1")).created_at == chosen.created_at
    with pytest.raises(RunExistsError):
        await engine.fork("o1", run_id="o1.fork.1", from_seq=1)  # another fork, at another seq


async def test_a_fork_from_an_earlier_seq_or_with_another_input_runs_those_again(
    make_engine: Any,
) -> None:
    engine = await make_engine(order)
    await failed_order(engine)
    broken["charge"] = False
    again = await engine.fork("o1", from_seq=2, input="o2")
    assert again.forked_from == ("o1", 2) and again.input == "o2"
    await engine.tick()
    assert (await engine.get_run(again.id)).status == RunStatus.SUSPENDED  # waits for confirm
    await engine.signal(again.id, "confirm", "again")
    done = await settle(engine, again.id)
    # seq 1 reused (its recorded result, for the old input), the rest run for the new one
    assert done.output == ["reserved o1", "again", "charged o2"]
    assert calls["reserve"] == 1
    whole = await engine.fork("o1", from_seq=1)
    await engine.tick()
    assert calls["reserve"] == 2  # nothing copied: everything runs again
    assert await engine.list_steps(whole.id) != [] and whole.forked_from == ("o1", 1)


async def test_a_fork_of_a_completed_run_reuses_everything(make_engine: Any) -> None:
    engine = await make_engine(order)
    broken["charge"] = False
    await engine.start(order, "o1", run_id="o1")
    await engine.tick()
    await engine.signal("o1", "confirm", "yes")
    first = await settle(engine, "o1")
    fork = await engine.fork("o1")
    assert fork.forked_from == ("o1", 4)
    done = await settle(engine, fork.id)
    assert done.output == first.output and (calls["reserve"], calls["charge"]) == (1, 1)


async def test_a_fork_is_admitted_like_a_start(make_engine: Any) -> None:
    engine = await make_engine(keyed)
    await engine.start(keyed, None, run_id="k1")
    await engine.tick()
    with pytest.raises(SingletonQueueFullError):
        await engine.fork("k1")  # the key is busy and its line takes nobody
    await engine.signal("k1", "go")
    await settle(engine, "k1")
    fork = await engine.fork("k1", from_seq=2)  # before its signal
    await engine.tick()
    assert (await engine.get_run(fork.id)).status == RunStatus.SUSPENDED
    assert calls["reserve"] == 1


async def test_a_fork_over_its_quota_is_refused(make_engine: Any) -> None:
    @runlane.workflow(name="fork.quota", concurrency=Concurrency(key=lambda i: "t", limit=1))
    async def quota(ctx: runlane.Context, _: Any) -> None:
        await ctx.wait_for_signal("go")

    engine = await make_engine(quota)
    await engine.start(quota, None, run_id="q1")
    with pytest.raises(ConcurrencyLimitError):
        await engine.fork("q1")
    assert await engine.get_run("q1.fork.1") is None


async def test_a_fork_takes_the_latest_version_or_the_one_asked(make_engine: Any) -> None:
    @runlane.workflow(name="fork.versioned", version="1")
    async def v1(ctx: runlane.Context, _: Any) -> str:
        await ctx.step(reserve, "v")
        raise RuntimeError("a bug")

    @runlane.workflow(name="fork.versioned", version="2")
    async def v2(ctx: runlane.Context, _: Any) -> str:
        return str(await ctx.step(reserve, "v"))

    engine = await make_engine(v1, v2)
    await engine.start(v1, None, run_id="v", version="1")
    assert (await settle(engine, "v")).status == RunStatus.FAILED
    fixed = await engine.fork("v")
    assert fixed.version == "2"
    assert (await settle(engine, fixed.id)).output == "reserved v"
    assert calls["reserve"] == 1
    assert (await engine.fork("v", version="1")).version == "1"


async def test_a_fork_of_nothing_or_from_a_bad_seq_is_refused(make_engine: Any) -> None:
    engine = await make_engine(order)
    with pytest.raises(RunNotFoundError):
        await engine.fork("nobody")
    await failed_order(engine)
    for bad in (0, -1, True, "2"):
        with pytest.raises(ValueError, match="from_seq"):
            await engine.fork("o1", from_seq=bad)
    with pytest.raises(ValueError, match="run_id"):
        await engine.fork("o1", run_id="")


async def test_a_fork_starts_with_the_originals_attributes(make_engine: Any) -> None:
    engine = await make_engine(order)
    await engine.start(order, "o1", run_id="o1", attributes={"customer": "acme"})
    await engine.tick()
    await engine.signal("o1", "confirm", "yes")
    await settle(engine, "o1")
    fork = await engine.fork("o1")
    assert fork.attributes == {"customer": "acme"}
    found = await engine.list_runs(attributes={"customer": "acme"})
    assert {run.id for run in found} == {"o1", fork.id}
