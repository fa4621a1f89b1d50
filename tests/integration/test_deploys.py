"""Deploys on every store: engines running different code share one store without losing a
run, versions, and patches that change a workflow's code under runs in flight.

Engines here are driven by hand (``drive=False``, ManualClock) and share a store, as the
members of a fleet mid-deploy do: each one's passes claim only what its code can replay.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import (
    DefinitionError,
    Engine,
    RunStatus,
    Singleton,
    UnknownWorkflowError,
)
from runlane.models import RetryTimer
from runlane.testing import ManualClock

RETRY = RetryTimer(1.0, 30.0)

done: list[str] = []


@runlane.step(name="deploy.reserve")
def reserve(order: str) -> str:
    done.append(f"reserve:{order}")
    return f"reserved {order}"


@runlane.step(name="deploy.receipt")
def receipt(order: str) -> str:
    done.append(f"receipt:{order}")
    return f"receipt {order}"


@runlane.step(name="deploy.ship")
def ship(order: str) -> str:
    done.append(f"ship:{order}")
    return f"shipped {order}"


STEPS = [reserve, receipt, ship]


@runlane.workflow(name="order")
async def order_before(ctx: runlane.Context, order: str) -> str:
    await ctx.step(reserve, order)
    await ctx.wait_for_signal("go")
    return str(await ctx.step(ship, order))


@runlane.workflow(name="order")
async def order_patched(ctx: runlane.Context, order: str) -> str:
    await ctx.step(reserve, order)
    if ctx.patched("send-receipt"):
        await ctx.step(receipt, order)
    await ctx.wait_for_signal("go")
    return str(await ctx.step(ship, order))


@runlane.workflow(name="order")
async def order_deprecated(ctx: runlane.Context, order: str) -> str:
    await ctx.step(reserve, order)
    ctx.deprecate_patch("send-receipt")
    await ctx.step(receipt, order)
    await ctx.wait_for_signal("go")
    return str(await ctx.step(ship, order))


@runlane.workflow(name="order")
async def order_rewritten(ctx: runlane.Context, order: str) -> str:
    await ctx.step(reserve, order)
    await ctx.step(receipt, order)  # no patch: a run recorded before this cannot replay it
    await ctx.wait_for_signal("go")
    return str(await ctx.step(ship, order))


@runlane.workflow(name="asks-twice")
async def asks_twice(ctx: runlane.Context, _: Any) -> list[bool]:
    first = ctx.patched("x")
    await ctx.sleep(5)
    return [first, ctx.patched("x"), ctx.patched("y")]


@pytest.fixture(autouse=True)
def _forget() -> None:
    done.clear()


def kinds(steps: list[runlane.StepRecord]) -> list[tuple[str, str]]:
    return [(str(s.kind), s.name) for s in steps]


async def finished(engine: Engine, clock: ManualClock, run_id: str) -> runlane.Run:
    """Drive ``engine`` until the run is terminal (a few passes at most)."""
    seen = None
    for _ in range(5):
        await engine.tick()
        seen = await engine.get_run(run_id)
        assert seen is not None
        if seen.is_terminal:
            return seen
        clock.advance(1)
    raise AssertionError(f"run {run_id} is still not terminal: {seen}")


# ---------------------------------------------------------------- patches


async def test_a_patch_takes_new_runs_down_the_new_branch_and_old_runs_down_the_old(
    make_engine: Any, clock: ManualClock
) -> None:
    before = await make_engine(order_before, steps=STEPS)
    await before.start("order", "old", run_id="old")
    await before.tick()  # reserved, waiting for "go": recorded by the code before the patch
    after = await make_engine(order_patched, steps=STEPS)
    await after.start("order", "new", run_id="new")
    await after.tick()
    for run_id in ("old", "new"):
        await after.signal(run_id, "go")
    assert (await finished(after, clock, "old")).output == "shipped old"
    assert (await finished(after, clock, "new")).output == "shipped new"
    assert "receipt:old" not in done and "receipt:new" in done
    assert kinds(await after.list_steps("old")) == [
        ("step", "deploy.reserve"),
        ("signal", "go"),
        ("step", "deploy.ship"),
    ]
    assert kinds(await after.list_steps("new")) == [
        ("step", "deploy.reserve"),
        ("patch", "send-receipt"),
        ("step", "deploy.receipt"),
        ("signal", "go"),
        ("step", "deploy.ship"),
    ]


async def test_a_deprecated_patch_replays_histories_with_and_without_its_marker(
    make_engine: Any, clock: ManualClock
) -> None:
    patched = await make_engine(order_patched, steps=STEPS)
    await patched.start("order", "marked", run_id="marked")
    await patched.tick()  # its history has the marker
    deprecated = await make_engine(order_deprecated, steps=STEPS)
    await deprecated.start("order", "fresh", run_id="fresh")
    await deprecated.tick()
    for run_id in ("marked", "fresh"):
        await deprecated.signal(run_id, "go")
        assert (await finished(deprecated, clock, run_id)).status == RunStatus.COMPLETED
    assert done.count("receipt:marked") == done.count("receipt:fresh") == 1
    fresh = kinds(await deprecated.list_steps("fresh"))
    assert ("patch", "send-receipt") not in fresh  # deprecated: nothing recorded


async def test_a_history_no_branch_can_follow_fails_the_run_naming_the_position(
    make_engine: Any, clock: ManualClock
) -> None:
    before = await make_engine(order_before, steps=STEPS)
    await before.start("order", "old", run_id="old")
    await before.tick()
    rewritten = await make_engine(order_rewritten, steps=STEPS)
    await rewritten.signal("old", "go")
    run = await finished(rewritten, clock, "old")
    assert run.status == RunStatus.FAILED and run.error is not None
    assert run.error["type"] == "NonDeterminismError"
    assert "op #2: history has signal 'go', the code now does step 'deploy.receipt'" in str(
        run.error["message"]
    )
    assert "receipt:old" not in done


async def test_old_code_leaves_a_run_the_new_code_patched_to_an_engine_that_has_the_patch(
    make_engine: Any, clock: ManualClock
) -> None:
    """Mid-deploy, a run patched by an engine on the new code comes to one on the old code:
    that engine cannot replay the marker, so it gives the run back for a little while, and
    never fails it; the new code takes it then."""
    after = await make_engine(order_patched, steps=STEPS)
    await after.start("order", "r", run_id="r")
    await after.tick()
    before = await make_engine(order_before, steps=STEPS)
    await before.signal("r", "go")
    await before.tick()
    run = await before.get_run("r")
    assert run is not None and run.status == RunStatus.SUSPENDED and run.error is None
    assert run.wake_at == clock.now() + timedelta(seconds=2)
    assert await before.tick() == 0  # not due yet: no busy loop between old engines
    clock.advance(2)
    assert (await finished(after, clock, "r")).output == "shipped r"
    assert done == ["reserve:r", "receipt:r", "ship:r"]


async def test_patched_answers_the_same_for_a_change_id_all_run_long(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await make_engine(asks_twice)
    await engine.start("asks-twice", None, run_id="a")
    await engine.tick()
    clock.advance(5)
    assert (await finished(engine, clock, "a")).output == [True, True, True]
    assert kinds(await engine.list_steps("a")) == [
        ("patch", "x"),
        ("sleep", "sleep"),
        ("patch", "y"),
    ]


async def test_a_patch_needs_a_change_id(make_engine: Any) -> None:
    @runlane.workflow(name="bad-patch")
    async def bad(ctx: runlane.Context, _: Any) -> bool:
        return ctx.patched("")

    engine = await make_engine(bad)
    await engine.start("bad-patch", None, run_id="b")
    await engine.tick()
    run = await engine.get_run("b")
    assert run is not None and run.error is not None
    assert run.error["type"] == DefinitionError.__name__


# ---------------------------------------------------------------- versions


@runlane.workflow(name="greet", version="1")
async def greet_v1(ctx: runlane.Context, name: str) -> str:
    return f"hello {name}"


@runlane.workflow(name="greet", version="2")
async def greet_v2(ctx: runlane.Context, name: str) -> str:
    if name == "again":
        ctx.continue_as_new("done")
    return f"hi {name}"


@runlane.workflow(name="greet", version="10")
async def greet_v10(ctx: runlane.Context, name: str) -> str:
    return f"hey {name}"


async def test_start_takes_the_latest_version_and_version_pins_one(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await make_engine(greet_v2, greet_v10, greet_v1)
    latest = await engine.start("greet", "a", run_id="latest")
    pinned = await engine.start("greet", "b", run_id="pinned", version="2")
    assert (latest.version, pinned.version) == ("10", "2")  # 10 > 2: both are digits
    assert (await finished(engine, clock, "latest")).output == "hey a"
    assert (await finished(engine, clock, "pinned")).output == "hi b"
    with pytest.raises(UnknownWorkflowError, match="greet@3"):
        await engine.start("greet", "c", version="3")


async def test_a_continuation_starts_the_latest_version_of_the_engine_running_it(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await make_engine(greet_v1, greet_v2, greet_v10)
    await engine.start("greet", "again", run_id="c", version="2")
    await finished(engine, clock, "c")
    continued = await engine.get_run("c~1")
    assert continued is not None and continued.version == "10"


def test_a_version_is_a_string_without_an_at_sign() -> None:
    decorate: Any = runlane.workflow

    async def body(ctx: runlane.Context, _: Any) -> None: ...

    for wrong in ("", "1@2", " 2", None, True):
        with pytest.raises(DefinitionError, match="version="):
            decorate(name="v", version=wrong)(body)
    three = decorate(name="v", version=3)(body)
    assert runlane.definitions.workflow_definition(three).version == "3"


def test_registering_a_version_twice_is_an_error() -> None:
    with pytest.raises(DefinitionError, match="already registered"):
        Engine("memory://", workflows=[greet_v1, greet_v1])


# ---------------------------------------------------------------- routing by code


@runlane.workflow(name="job", version="1")
async def job_v1(ctx: runlane.Context, n: int) -> str:
    await ctx.sleep(10)
    return "v1"


@runlane.workflow(name="job", version="2")
async def job_v2(ctx: runlane.Context, n: int) -> str:
    await ctx.sleep(10)
    return "v2"


async def test_runs_of_a_version_no_engine_serves_wait_unharmed_for_one_that_does(
    make_engine: Any, clock: ManualClock
) -> None:
    """The rolling deploy of the issue: an engine without v2 never claims, recovers, counts
    or kills a v2 run; the runs complete once an engine with v2 comes up."""
    new = await make_engine(job_v1, job_v2, max_recovery_attempts=3)
    ids = [f"j{i}" for i in range(10)]
    for i, run_id in enumerate(ids):
        await new.start("job", i, run_id=run_id)
    await new.run_pending()  # claimed and asleep: then the engine dies holding half of them
    clock.advance(10)
    for run_id in ids[:5]:  # leased to a turn that never comes back
        lease_until = clock.now() + timedelta(seconds=30)
        claimed = await new.store.claim_run(
            run_id, "dead-engine:1", clock.now(), lease_until, singleton_retry=RETRY
        )
        assert claimed.claim is not None
    old = await make_engine(job_v1, max_recovery_attempts=3)
    for _ in range(6):  # many passes, past the lease and any recovery limit
        clock.advance(31)
        assert await old.tick() == 0
    runs = [await old.get_run(run_id) for run_id in ids]
    assert all(r is not None and r.version == "2" and r.recoveries == 0 for r in runs)
    assert {r.status for r in runs if r is not None} == {RunStatus.RUNNING, RunStatus.SUSPENDED}
    replacement = await make_engine(job_v2, max_recovery_attempts=3)
    for run_id in ids:
        assert (await finished(replacement, clock, run_id)).output == "v2"
    recovered = [await replacement.get_run(run_id) for run_id in ids]
    assert [r.recoveries for r in recovered if r is not None] == [1] * 5 + [0] * 5


async def test_a_pending_run_nobody_serves_keeps_its_status(
    make_engine: Any, clock: ManualClock
) -> None:
    producer = await make_engine(job_v2, consumers="never")
    await producer.start("job", 1, run_id="p")
    old = await make_engine(job_v1)
    clock.advance(60)
    assert await old.tick() == 0
    run = await old.get_run("p")
    assert run is not None and run.status == RunStatus.PENDING and run.lease_owner is None


@runlane.workflow(name="lane-job", version="1", singleton=Singleton(key=lambda _: "lane"))
async def lane_v1(ctx: runlane.Context, _: Any) -> str:
    return str(await ctx.wait_for_signal("go"))


@runlane.workflow(name="lane-job", version="2", singleton=Singleton(key=lambda _: "lane"))
async def lane_v2(ctx: runlane.Context, _: Any) -> str:
    return "v2:" + str(await ctx.wait_for_signal("go"))


async def test_a_freed_slot_goes_to_the_next_waiter_whatever_version_serves_it(
    make_engine: Any, clock: ManualClock
) -> None:
    both = await make_engine(lane_v1, lane_v2)
    await both.start("lane-job", None, run_id="holder", version="1")
    await both.tick()
    await both.start("lane-job", None, run_id="waiter", version="2")
    await both.tick()
    waiting = await both.get_run("waiter")
    assert waiting is not None and waiting.status == RunStatus.BLOCKED
    only_v1 = await make_engine(lane_v1)
    await only_v1.signal("holder", "go", "x")
    await only_v1.tick()  # settles the holder; the waiter is woken, not handed to it
    waiter = await only_v1.get_run("waiter")
    assert waiter is not None and waiter.lease_owner is None and not waiter.holds_slot
    await both.signal("waiter", "go", "y")
    assert (await finished(both, clock, "waiter")).output == "v2:y"


async def test_an_engine_lists_itself_and_its_peers_with_what_each_serves(
    make_engine: Any, clock: ManualClock
) -> None:
    new = await make_engine(job_v1, job_v2)
    old = await make_engine(job_v1)
    web = await make_engine(job_v2, consumers="never")
    for engine in (new, old, web):
        await engine.get_run("nothing")  # opens: each one announces itself
    listed = {e.id: e for e in await new.list_engines()}
    assert listed[new.id].serves == (("job", "1"), ("job", "2"))
    assert listed[old.id].serves == (("job", "1"),)
    assert listed[web.id].serves == ()  # a producer claims nothing
    assert all(e.alive for e in listed.values())
    clock.advance(3 * 30 + 1)
    await new.tick()  # beats; the others stay silent
    states = {e.id: e.alive for e in await new.list_engines()}
    assert states == {new.id: True, old.id: False, web.id: False}
    await old.drain()
    await old.__aexit__(None, None, None)  # a clean stop removes its record
    assert old.id not in {e.id for e in await new.list_engines()}
    clock.advance(3600 + 31)
    await new.tick()  # prunes the records silent for an hour
    assert [e.id for e in await new.list_engines()] == [new.id]


async def test_a_run_of_a_version_no_live_engine_serves_is_counted(
    make_engine: Any, clock: ManualClock
) -> None:
    from runlane.presence import unserved

    old = await make_engine(job_v1)
    producer = await make_engine(job_v1, job_v2, consumers="never")
    await producer.start("job", 1, run_id="v2", version="2")
    await producer.start("job", 1, run_id="v1", version="1")
    engines = await old.list_engines()
    active = await old.read(lambda store: store.active_code_counts())
    assert unserved(active, engines) == {("job", "2"): 1}
    clock.advance(timedelta(minutes=10).total_seconds())  # every engine silent: all unserved
    engines = await old.list_engines()
    assert unserved(active, engines) == {("job", "1"): 1, ("job", "2"): 1}
