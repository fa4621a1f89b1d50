"""Run-level rate limits, throttles and debounce, on every store, driven by a ManualClock."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

import runlane
from runlane import (
    ChildFailedError,
    Concurrency,
    ConcurrencyLimitError,
    Debounce,
    RateLimit,
    RateLimitError,
    RunStatus,
    Singleton,
    SingletonQueueFullError,
)

from ..helpers import settle

# ---------------------------------------------------------------- workflows


@runlane.workflow(name="notify", rate_limit=RateLimit(limit=2, period=60))
async def notify(ctx: runlane.Context, i: Any) -> Any:
    return i


@runlane.workflow(
    name="sms", rate_limit=RateLimit(limit=1, period=10, key=lambda i: i.get("tenant"))
)
async def sms(ctx: runlane.Context, i: Any) -> Any:
    return i


@runlane.workflow(name="email", rate_limit=RateLimit(limit=1, period=10, key=lambda i: i["tenant"]))
async def email(ctx: runlane.Context, i: Any) -> Any:
    return i


@runlane.workflow(
    name="crawl",
    rate_limit=RateLimit(limit=2, period=10, key=lambda i: i["site"], on_limit="delay"),
)
async def crawl(ctx: runlane.Context, i: dict[str, Any]) -> str:
    return ctx.now().isoformat()  # when it began


@runlane.workflow(name="reindex", debounce=Debounce(key=lambda i: i["doc"], period=5))
async def reindex(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return i


@runlane.workflow(name="digest", debounce=Debounce(key=lambda i: i["user"], period=5, max_wait=10))
async def digest(ctx: runlane.Context, i: dict[str, Any]) -> Any:
    return i


@runlane.workflow(
    name="on-edit",
    on_event=("doc.edited",),
    debounce=Debounce(key=lambda p: p["doc"], period=5),
)
async def on_edit(ctx: runlane.Context, payload: dict[str, Any]) -> Any:
    return payload


async def began(engine: runlane.Engine, t0: datetime) -> dict[str, float]:
    """Seconds after ``t0`` at which each completed run of ``crawl`` began."""
    runs = await engine.list_runs(status="completed")
    return {r.id: (datetime.fromisoformat(r.output) - t0).total_seconds() for r in runs}


# ---------------------------------------------------------------- rate limits that refuse


async def test_a_start_over_the_sliding_window_is_refused_with_retry_after(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(notify)
    await engine.start(notify, 1, run_id="a")
    clock.advance(10)
    await engine.start(notify, 2, run_id="b")
    clock.advance(10)
    with pytest.raises(RateLimitError) as refused:
        await engine.start(notify, 3, run_id="c")
    error = refused.value
    assert (error.workflow, error.key, error.limit, error.period) == ("notify", None, 2, 60.0)
    assert error.retry_after == pytest.approx(40.0) and error.http_status == 429
    assert await engine.get_run("c") is None
    clock.advance(40)  # "a" leaves the window: room for one, and only one
    assert (await engine.start(notify, 4, run_id="d")).status == RunStatus.PENDING
    clock.advance(5)
    with pytest.raises(RateLimitError) as again:
        await engine.start(notify, 5, run_id="e")
    assert again.value.retry_after == pytest.approx(5.0)  # "b" leaves at 70


async def test_the_window_slides_rather_than_resetting_on_a_boundary(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(notify)
    clock.advance(59)
    await engine.start(notify, None, run_id="a")
    await engine.start(notify, None, run_id="b")
    clock.advance(2)  # a fixed one-minute window would have room again at 60
    with pytest.raises(RateLimitError) as refused:
        await engine.start(notify, None, run_id="c")
    assert refused.value.retry_after == pytest.approx(58.0)


async def test_each_key_has_its_own_window_and_a_none_key_is_unlimited(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sms)
    await engine.start(sms, {"tenant": "acme"}, run_id="acme-1")
    await engine.start(sms, {"tenant": "globex"}, run_id="globex-1")
    with pytest.raises(RateLimitError) as refused:
        await engine.start(sms, {"tenant": "acme"}, run_id="acme-2")
    assert refused.value.key == "acme" and refused.value.retry_after == pytest.approx(10.0)
    for n in range(5):
        await engine.start(sms, {}, run_id=f"free-{n}")
    assert len(await engine.list_runs()) == 7


async def test_a_rate_limit_belongs_to_its_workflow(make_engine: Any) -> None:
    engine = await make_engine(sms, email)
    await engine.start(sms, {"tenant": "acme"}, run_id="s")
    await engine.start(email, {"tenant": "acme"}, run_id="e")  # the same key, another workflow
    with pytest.raises(RateLimitError):
        await engine.start(email, {"tenant": "acme"}, run_id="e2")


async def test_an_idempotent_restart_of_an_existing_run_id_is_never_refused(
    make_engine: Any,
) -> None:
    engine = await make_engine(notify)
    await engine.start(notify, 1, run_id="a")
    await engine.start(notify, 2, run_id="b")
    again = await engine.start(notify, 1, run_id="a")
    assert again.id == "a" and len(await engine.list_runs()) == 2


async def test_runs_that_finished_still_count_in_the_window(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(notify)
    for run_id in ("a", "b"):
        await engine.start(notify, None, run_id=run_id)
        await settle(engine, run_id)
    with pytest.raises(RateLimitError):
        await engine.start(notify, None, run_id="c")


@runlane.workflow(name="poll", rate_limit=RateLimit(limit=2, period=60))
async def poll(ctx: runlane.Context, n: int) -> int:
    if n < 2:
        ctx.continue_as_new(n + 1)
    return n


async def test_a_continuation_is_no_new_start_of_the_rate_limit(make_engine: Any) -> None:
    engine = await make_engine(poll)
    await engine.start(poll, 0, run_id="a")
    assert (await settle(engine, "a~2")).output == 2
    await engine.start(poll, 2, run_id="b")  # the window holds "a" and "b" only
    with pytest.raises(RateLimitError):
        await engine.start(poll, 2, run_id="c")


@runlane.workflow(name="fan")
async def fan(ctx: runlane.Context, _: Any) -> Any:
    for n in range(3):
        try:
            await ctx.child(notify, n, run_id=f"kid-{n}")
        except ChildFailedError as exc:
            cause = exc.__cause__
            assert isinstance(cause, RateLimitError)
            return {"refused": exc.child_id, "retry_after": cause.retry_after}
    return None


async def test_a_child_start_over_the_limit_fails_in_the_parent_with_the_refusal(
    make_engine: Any,
) -> None:
    engine = await make_engine(fan, notify)
    await engine.start(fan, None, run_id="p")
    run = await settle(engine, "p")
    assert run.output == {"refused": "kid-2", "retry_after": 60.0}
    assert await engine.get_run("kid-2") is None


# ---------------------------------------------------------------- throttles


async def test_a_throttle_accepts_every_start_and_begins_each_when_the_window_allows(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(crawl)
    t0 = clock.now()
    runs = [await engine.start(crawl, {"site": "x"}, run_id=f"x{n}") for n in range(5)]
    assert [r.status for r in runs] == ["pending", "pending", "blocked", "blocked", "blocked"]
    assert [r.wake_at for r in runs[2:]] == [t0 + timedelta(seconds=s) for s in (10, 10, 20)]
    other = await engine.start(crawl, {"site": "y"}, run_id="y0")  # another key: at once
    assert other.status == RunStatus.PENDING
    for _ in range(3):
        await engine.tick()
        clock.advance(10)
    assert await began(engine, t0) == {"x0": 0, "x1": 0, "y0": 0, "x2": 10, "x3": 10, "x4": 20}


async def test_throttled_runs_begin_in_order_never_more_than_the_limit_in_a_window(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(crawl)
    t0 = clock.now()
    for second in range(30):
        if second < 6:  # one start a second; ids that sort against the order of the starts
            await engine.start(crawl, {"site": "x"}, run_id=f"run-{9 - second}")
        await engine.tick()
        clock.advance(1)
    times = await began(engine, t0)
    assert [times[f"run-{9 - n}"] for n in range(6)] == [0, 1, 10, 11, 20, 21]


async def test_the_execution_timeout_of_a_throttled_run_counts_from_its_beginning(
    make_engine: Any, clock: Any
) -> None:
    @runlane.workflow(
        name="slow-crawl",
        rate_limit=RateLimit(limit=1, period=100, on_limit="delay"),
        execution_timeout=30,
    )
    async def slow_crawl(ctx: runlane.Context, _: Any) -> str:
        return "done"

    engine = await make_engine(slow_crawl)
    await engine.start(slow_crawl, None, run_id="first")
    held = await engine.start(slow_crawl, None, run_id="second")
    assert held.deadline_at == clock.now() + timedelta(seconds=130)
    await settle(engine, "first")
    clock.advance(50)  # past 30 s after the start, far before its beginning
    await engine.tick()
    assert (await engine.get_run("second")).status == RunStatus.BLOCKED
    clock.advance(50)
    assert (await settle(engine, "second")).status == RunStatus.COMPLETED


# ---------------------------------------------------------------- debounce


async def test_a_debounced_start_replaces_the_input_and_moves_the_start(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(reindex)
    t0 = clock.now()
    first = await engine.start(reindex, {"doc": "a", "v": 1}, run_id="first")
    assert (first.status, first.wake_at) == (RunStatus.BLOCKED, t0 + timedelta(seconds=5))
    clock.advance(3)
    second = await engine.start(reindex, {"doc": "a", "v": 2}, run_id="second")
    assert second.id == "first" and second.input == {"doc": "a", "v": 2}
    assert second.wake_at == t0 + timedelta(seconds=8)
    assert await engine.get_run("second") is None
    other = await engine.start(reindex, {"doc": "b", "v": 1})  # another key: a run of its own
    assert other.id != "first"
    clock.advance(4)
    await engine.tick()
    assert (await engine.get_run("first")).status == RunStatus.BLOCKED  # moved to 8: not yet
    clock.advance(1)
    done = await settle(engine, "first")
    assert done.output == {"doc": "a", "v": 2}
    later = await engine.start(reindex, {"doc": "a", "v": 3})  # the run began: a new one
    assert later.id != "first" and later.status == RunStatus.BLOCKED


async def test_a_stale_or_replayed_timer_hand_off_begins_no_held_run_early(
    make_engine: Any, clock: Any
) -> None:
    # A hand-off claims a waiting run whatever its wake time; a copy of one delivered while a
    # run is still held by its debounce or throttle (a duplicate, a replay) must not begin it.
    engine = await make_engine(reindex, crawl)
    t0 = clock.now()
    await engine.start(reindex, {"doc": "a", "v": 1}, run_id="debounced")
    for n in range(3):
        await engine.start(crawl, {"site": "x"}, run_id=f"x{n}")
    await engine.tick()  # x0 and x1 begin; x2 is held until t0 + 10
    for run_id in ("debounced", "x2"):
        await engine._execution._spawn(run_id, handoff=True)
        held = await engine.get_run(run_id)
        assert held.status == RunStatus.BLOCKED and held.begin_at > clock.now(), held
    clock.advance(10)
    assert (await settle(engine, "debounced")).output == {"doc": "a", "v": 1}
    x2 = await settle(engine, "x2")
    assert datetime.fromisoformat(x2.output) == t0 + timedelta(seconds=10)


async def test_a_hand_off_a_clock_behind_refuses_leaves_the_run_due_at_its_begin_at(
    make_engine: Any, clock: Any
) -> None:
    # The engine that hands a due timer off pushes its wake time a lease ahead; a claimer whose
    # clock is behind the begin_at refuses it, and must leave it due at the begin_at, not late.
    engine = await make_engine(reindex)
    t0 = clock.now()
    await engine.start(reindex, {"doc": "a", "v": 1}, run_id="held")
    begin = t0 + timedelta(seconds=5)
    ahead = begin + timedelta(milliseconds=2)  # the handing engine's clock
    [handed] = await engine.store.hand_off_due_runs(ahead, 10, None, ahead + timedelta(seconds=30))
    assert handed.id == "held" and handed.wake_at > begin
    clock.advance(5 - 0.001)  # this engine's clock: 1 ms before the begin_at
    await engine._execution._spawn("held", handoff=True)
    held = await engine.get_run("held")
    assert (held.status, held.wake_at) == (RunStatus.BLOCKED, begin)
    clock.advance(0.001)
    done = await settle(engine, "held")  # due now, by this clock: no lease to wait out
    assert done.output == {"doc": "a", "v": 1}


async def test_max_wait_caps_how_far_a_debounced_start_moves(make_engine: Any, clock: Any) -> None:
    engine = await make_engine(digest)
    t0 = clock.now()
    for second, expected in ((0, 5), (4, 9), (8, 10), (9.5, 10)):
        clock.set(t0 + timedelta(seconds=second))
        run = await engine.start(digest, {"user": "u", "at": second})
        assert run.wake_at == t0 + timedelta(seconds=expected), second
    clock.set(t0 + timedelta(seconds=10))
    done = await settle(engine, run.id)
    assert done.output == {"user": "u", "at": 9.5}
    assert len(await engine.list_runs()) == 1


async def test_debounced_event_subscribers_start_one_run_with_the_last_payload(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(on_edit)
    for n in range(4):
        assert await engine.publish_event("doc.edited", {"doc": "d", "n": n}, id=f"e{n}") == 1
        clock.advance(2)
    [held] = await engine.list_runs()
    assert held.id == "on-edit:event:e0" and held.input == {"doc": "d", "n": 3}
    clock.advance(3)
    assert (await settle(engine, held.id)).output == {"doc": "d", "n": 3}


async def test_if_exists_fail_does_not_refuse_a_start_that_folds_into_a_debounced_run(
    make_engine: Any,
) -> None:
    engine = await make_engine(reindex)
    await engine.start(reindex, {"doc": "a"}, run_id="first", if_exists="fail")
    folded = await engine.start(reindex, {"doc": "a", "v": 2}, run_id="again", if_exists="fail")
    assert folded.id == "first"
    with pytest.raises(runlane.RunExistsError):
        await engine.start(reindex, {"doc": "a"}, run_id="first", if_exists="fail")


# ---------------------------------------------------------------- compositions


@runlane.workflow(
    name="export",
    rate_limit=RateLimit(limit=3, period=60, key=lambda i: i["tenant"]),
    concurrency=Concurrency(key=lambda i: f"tenant:{i['tenant']}", limit=1),
)
async def export(ctx: runlane.Context, i: Any) -> Any:
    return await ctx.wait_for_signal("done")


async def test_a_start_refused_by_the_quota_uses_no_room_in_the_rate_window(
    make_engine: Any,
) -> None:
    engine = await make_engine(export)
    await engine.start(export, {"tenant": "t"}, run_id="a")
    for n in range(5):
        with pytest.raises(ConcurrencyLimitError):
            await engine.start(export, {"tenant": "t"}, run_id=f"q{n}")
    await engine.tick()
    await engine.signal("a", "done")
    await settle(engine, "a")
    await engine.start(export, {"tenant": "t"}, run_id="b")
    await engine.signal("b", "done")
    await settle(engine, "b")
    await engine.start(export, {"tenant": "t"}, run_id="c")
    await engine.signal("c", "done")
    await settle(engine, "c")
    with pytest.raises(RateLimitError):  # three starts in the window: the rate limit's turn
        await engine.start(export, {"tenant": "t"}, run_id="d")


@runlane.workflow(
    name="deploy",
    rate_limit=RateLimit(limit=3, period=60),
    singleton=Singleton(key=lambda i: "prod", max_queue_depth=1),
)
async def deploy(ctx: runlane.Context, i: Any) -> Any:
    return await ctx.wait_for_signal("done")


async def test_a_start_refused_by_a_full_singleton_backlog_uses_no_room_in_the_rate_window(
    make_engine: Any,
) -> None:
    engine = await make_engine(deploy)
    await engine.start(deploy, None, run_id="a")
    await engine.tick()  # "a" holds the lane
    await engine.start(deploy, None, run_id="b")  # waits behind it: the backlog is full
    for n in range(3):
        with pytest.raises(SingletonQueueFullError):
            await engine.start(deploy, None, run_id=f"full-{n}")
    await engine.signal("a", "done")
    await settle(engine, "a")
    assert (await engine.get_run("b")).holds_slot
    await engine.start(deploy, None, run_id="c")  # the window's third start
    # The backlog is full again ("c" waits) and so is the window: the rate limit, checked
    # first, is the refusal (and the backlog's refusals above used none of its room).
    with pytest.raises(RateLimitError):
        await engine.start(deploy, None, run_id="d")
    assert {r.id for r in await engine.list_runs()} == {"a", "b", "c"}


@runlane.workflow(
    name="rebuild",
    debounce=Debounce(key=lambda i: i["doc"], period=5),
    concurrency=Concurrency(key=lambda i: "builds", limit=1),
)
async def rebuild(ctx: runlane.Context, i: Any) -> Any:
    return i


async def test_the_quota_decides_acceptance_and_debounce_whether_it_is_a_new_run(
    make_engine: Any,
) -> None:
    engine = await make_engine(rebuild)
    held = await engine.start(rebuild, {"doc": "a", "v": 1})
    # A start that folds adds no run: the full quota does not refuse it.
    folded = await engine.start(rebuild, {"doc": "a", "v": 2})
    assert folded.id == held.id and folded.input == {"doc": "a", "v": 2}
    with pytest.raises(ConcurrencyLimitError):  # a new run of another key would be a second
        await engine.start(rebuild, {"doc": "b"})


@runlane.workflow(
    name="resize",
    rate_limit=RateLimit(limit=1, period=60, on_limit="delay"),
    debounce=Debounce(key=lambda i: i["image"], period=5),
)
async def resize(ctx: runlane.Context, i: Any) -> Any:
    return i


async def test_a_throttled_debounced_run_begins_when_both_allow(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(resize)
    t0 = clock.now()
    first = await engine.start(resize, {"image": "a", "v": 1})
    assert (first.rate_at, first.wake_at) == (t0 + timedelta(seconds=5),) * 2
    clock.advance(3)
    folded = await engine.start(resize, {"image": "a", "v": 2})
    assert folded.id == first.id and folded.wake_at == t0 + timedelta(seconds=8)
    clock.advance(7)
    assert (await settle(engine, first.id)).output == {"image": "a", "v": 2}
    # A new run: its debounce would begin it at 15, its window (one a minute) at 65.
    later = await engine.start(resize, {"image": "a", "v": 3})
    assert later.wake_at == t0 + timedelta(seconds=65)


@runlane.workflow(
    name="sync",
    rate_limit=RateLimit(limit=1, period=10, key=lambda i: i["tenant"], on_limit="delay"),
    singleton=Singleton(key=lambda i: i["store"]),
)
async def sync(ctx: runlane.Context, i: Any) -> Any:
    return await ctx.wait_for_signal("done")


async def test_a_throttled_run_waits_for_its_slot_only_once_it_begins(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(sync)
    await engine.start(sync, {"tenant": "t1", "store": "s"}, run_id="a")
    clock.advance(1)
    held = await engine.start(sync, {"tenant": "t1", "store": "s"}, run_id="b")  # begins at 10
    clock.advance(1)
    await engine.start(sync, {"tenant": "t2", "store": "s"}, run_id="c")  # begins now
    assert held.status == RunStatus.BLOCKED
    await engine.tick()
    await engine.signal("a", "done")
    await engine.tick()
    # The slot goes to "c", which began: "b", older but held by its throttle, waits no slot yet.
    runs = {r.id: r for r in await engine.list_runs()}
    assert (runs["a"].status, runs["c"].holds_slot, runs["b"].holds_slot) == (
        "completed",
        True,
        False,
    )
    clock.advance(10)
    await engine.tick()
    assert (await engine.get_run("b")).status == RunStatus.BLOCKED  # began; now "c" holds the slot
    await engine.signal("c", "done")
    await engine.tick()
    b = await engine.get_run("b")
    assert b.holds_slot and b.status == RunStatus.SUSPENDED


@runlane.workflow(
    name="publish",
    debounce=Debounce(key=lambda i: i["doc"], period=5),
    singleton=Singleton(key=lambda i: "site"),
)
async def publish(ctx: runlane.Context, i: Any) -> Any:
    return await ctx.wait_for_signal("done")


async def test_a_run_debounced_again_and_again_never_holds_up_the_singleton_lane(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(publish)
    await engine.start(publish, {"doc": "a"}, run_id="a")
    clock.advance(5)
    await engine.tick()  # "a" holds the lane
    busy = await engine.start(publish, {"doc": "busy", "v": 0}, run_id="busy")
    clock.advance(1)
    await engine.start(publish, {"doc": "b"}, run_id="b")
    for n in range(1, 6):  # "busy" is edited again and again, each time before it begins
        clock.advance(3)
        assert (await engine.start(publish, {"doc": "busy", "v": n})).id == busy.id
        await engine.tick()
    await engine.signal("a", "done")
    await engine.tick()
    assert (await engine.get_run("b")).holds_slot
    assert (await engine.get_run("busy")).status == RunStatus.BLOCKED
