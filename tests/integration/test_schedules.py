"""Schedules on every store, with the ManualClock: each window once across engines, overlap,
catch-up, pause, trigger, delete, quotas, DST."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import runlane
from runlane import (
    Concurrency,
    DefinitionError,
    Engine,
    RunStatus,
    Schedule,
    ScheduleNotFoundError,
    UnknownWorkflowError,
)
from runlane.testing import ManualClock


@runlane.workflow(name="report")
async def report(ctx: runlane.Context, input: Any) -> Any:
    return input


@runlane.workflow(name="holder")
async def holder(ctx: runlane.Context, input: Any) -> Any:
    return await ctx.wait_for_signal("done")


@runlane.workflow(name="tenant-job", concurrency=Concurrency(key="tenant:a", limit=1))
async def tenant_job(ctx: runlane.Context, input: Any) -> Any:
    return await ctx.wait_for_signal("done")


WORKFLOWS = [report, holder, tenant_job]
START = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)  # 30 s past a minute


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


async def engines(make_engine: Any, n: int = 1, **kwargs: Any) -> list[Engine]:
    return [await make_engine(*WORKFLOWS, **kwargs) for _ in range(n)]


async def runs_of(engine: Engine, schedule_id: str) -> list[runlane.Run]:
    runs = await engine.list_runs(tag=f"schedule:{schedule_id}", limit=1000)
    return sorted(runs, key=lambda r: r.id)


async def tick_all(*engines: Engine) -> None:
    for engine in engines:
        await engine.tick()


# ---------------------------------------------------------------- definitions


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, "exactly one of cron and every"),
        ({"cron": "* * * * *", "every": 60}, "exactly one of cron and every"),
        ({"cron": "61 * * * *"}, "invalid cron"),
        ({"cron": "* * *"}, "5 fields"),
        ({"every": 1.5}, "whole number of seconds"),
        ({"every": 0}, "whole number of seconds"),
        ({"every": 60, "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 3 * * *", "timezone": "Nowhere/At_All"}, "unknown time zone"),
        ({"every": 60, "overlap": "queue"}, "overlap must be"),
        ({"every": 60, "catchup": "some"}, "catchup must be"),
        ({"every": 60, "max_catchup": 0}, "max_catchup"),
        ({"every": 60, "jitter": -1}, "jitter"),
        ({"every": 60, "concurrency": Concurrency(key=lambda i: "k", limit=1)}, "fixed key"),
    ],
)
def test_a_bad_definition_is_a_definition_error(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(DefinitionError, match=problem):
        Schedule("s", "report", **options)


def test_every_takes_seconds_or_a_timedelta_and_its_windows_are_multiples_since_the_epoch() -> None:
    schedule = Schedule("s", report, every=timedelta(minutes=5))
    assert (schedule.workflow, schedule.every) == ("report", 300.0)
    assert schedule == Schedule("s", "report", every=300)
    assert schedule.next_window(START) == datetime(2026, 1, 1, 0, 5, tzinfo=UTC)


async def test_an_unknown_workflow_is_refused_before_anything_is_written(
    make_engine: Any,
) -> None:
    with pytest.raises(UnknownWorkflowError):
        await make_engine(*WORKFLOWS, schedules=[Schedule("s", "nope", every=60)])
    [engine] = await engines(make_engine)
    with pytest.raises(UnknownWorkflowError):
        await engine.schedules.upsert(Schedule("s", "nope", every=60))
    assert await engine.schedules.list() == []


@pytest.mark.parametrize("counted", [None, ["running"]])
async def test_a_stored_schedule_reads_back_with_every_field_and_its_timing(
    make_engine: Any, clock: ManualClock, counted: list[str] | None
) -> None:
    [engine] = await engines(make_engine)
    schedule = Schedule(
        "full",
        "tenant-job",
        cron="*/5 * * * *",
        timezone="Europe/Berlin",
        input={"kind": ["a", 1]},
        overlap="buffer_one",
        catchup="all",
        max_catchup=3,
        jitter=2.5,
        concurrency=Concurrency(key="own", limit=2, count_statuses=counted),
        priority=4,
        tags=("nightly",),
    )
    await engine.schedules.upsert(schedule)
    state = await engine.schedules.get("full")
    assert state is not None
    for field in dataclasses.fields(Schedule):
        assert getattr(state, field.name) == getattr(schedule, field.name), field.name
    assert (state.created_at, state.updated_at, state.last_fire_at) == (START, START, None)
    assert await engine.schedules.list() == [state]
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.last_error = None  # type: ignore[misc]


# ---------------------------------------------------------------- windows


async def test_each_window_starts_one_run_across_three_engines(
    make_engine: Any, clock: ManualClock
) -> None:
    cluster = await engines(make_engine, 3)
    state = await cluster[0].schedules.upsert(
        Schedule("minutely", "report", every=60, input={"kind": "tick"})
    )
    # The first window is the first multiple of 60 s since the epoch after it was created.
    assert state.next_fire_at == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    for _ in range(3):
        clock.advance(60)
        # All three read the window as due, then race to fire it: one compare-and-set wins.
        fired = await asyncio.gather(*(engine.fire_schedules() for engine in cluster))
        assert sorted(fired) == [0, 0, 1]
        await tick_all(*cluster, *cluster)
    runs = await runs_of(cluster[1], "minutely")
    assert [r.id for r in runs] == [
        "sched:minutely:20260101T000100Z",
        "sched:minutely:20260101T000200Z",
        "sched:minutely:20260101T000300Z",
    ]
    assert {(r.status, str(r.output)) for r in runs} == {(RunStatus.COMPLETED, "{'kind': 'tick'}")}
    later = await cluster[2].schedules.get("minutely")
    assert later is not None
    assert later.last_run_id == "sched:minutely:20260101T000300Z"
    assert later.last_fire_at == clock.now() and later.last_error is None
    assert later.next_fire_at == datetime(2026, 1, 1, 0, 4, tzinfo=UTC)


async def test_cron_windows_follow_the_schedules_time_zone(
    make_engine: Any, clock: ManualClock
) -> None:
    [engine] = await engines(make_engine)
    state = await engine.schedules.upsert(
        Schedule("nightly", "report", cron="0 3 * * *", timezone="Europe/Berlin")
    )
    assert state.next_fire_at == datetime(2026, 1, 1, 2, 0, tzinfo=UTC)  # 03:00 CET
    clock.set(datetime(2026, 1, 1, 2, 0, 1, tzinfo=UTC))
    await engine.tick()
    [run] = await runs_of(engine, "nightly")
    assert run.id == "sched:nightly:20260101T020000Z"


async def test_a_six_field_cron_has_seconds_first(make_engine: Any, clock: ManualClock) -> None:
    [engine] = await engines(make_engine)
    state = await engine.schedules.upsert(Schedule("fast", "report", cron="*/20 * * * * *"))
    assert state.next_fire_at == datetime(2026, 1, 1, 0, 0, 40, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "day", "expected"),
    [
        # 2026-03-08, clocks jump from 02:00 to 03:00: 02:30 does not exist and fires at 03:00.
        ("30 2 * * *", datetime(2026, 3, 8, tzinfo=UTC), ["20260308T070000Z", "20260309T063000Z"]),
        # 2026-11-01, clocks go back from 02:00 to 01:00: 01:30 occurs twice and fires once.
        ("30 1 * * *", datetime(2026, 11, 1, tzinfo=UTC), ["20261101T053000Z", "20261102T063000Z"]),
        # Every hour: the hour that occurs twice fires once.
        (
            "0 * * * *",
            datetime(2026, 11, 1, 4, 30, tzinfo=UTC),
            ["20261101T050000Z", "20261101T070000Z"],
        ),
    ],
)
async def test_daylight_saving_jumps_in_new_york(
    make_engine: Any, clock: ManualClock, cron: str, day: datetime, expected: list[str]
) -> None:
    clock.set(day)
    [engine] = await engines(make_engine)
    await engine.schedules.upsert(Schedule("dst", "report", cron=cron, timezone="America/New_York"))
    for _ in expected:  # from one window to the next, firing each when it is due
        state = await engine.schedules.get("dst")
        assert state is not None and state.next_fire_at is not None
        clock.set(state.next_fire_at)
        await engine.fire_schedules()
    assert [r.id.rsplit(":", 1)[1] for r in await runs_of(engine, "dst")] == expected


async def test_jitter_delays_a_window_by_the_same_amount_on_every_engine(
    make_engine: Any, clock: ManualClock
) -> None:
    one, two = await engines(make_engine, 2)
    schedule = Schedule("jittery", "report", every=60, jitter=30)
    first = await one.schedules.upsert(schedule)
    again = await two.schedules.upsert(schedule)
    assert first.next_fire_at == again.next_fire_at
    window = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert first.next_fire_at is not None
    assert window <= first.next_fire_at < window + timedelta(seconds=30)
    clock.set(first.next_fire_at - timedelta(microseconds=1))
    await one.tick()
    assert await runs_of(one, "jittery") == []
    clock.set(first.next_fire_at)
    await one.tick()
    [run] = await runs_of(one, "jittery")
    assert run.id == "sched:jittery:20260101T000100Z"  # the id names the window, not the delay


@runlane.workflow(name="elsewhere")
async def elsewhere(ctx: runlane.Context, input: Any) -> Any:
    return input


async def test_an_engine_fires_the_schedules_it_serves_and_leaves_the_others_to_their_engine(
    make_engine: Any, clock: ManualClock
) -> None:
    owner = await make_engine(*WORKFLOWS, elsewhere)
    [engine] = await engines(make_engine)  # it lacks the workflow "elsewhere"
    await owner.schedules.upsert(Schedule("foreign", "elsewhere", every=60))
    await owner.schedules.upsert(Schedule("plain", "report", every=60))
    await owner.schedules.upsert(Schedule("lane", "holder", every=60, overlap="skip"))
    clock.advance(60)
    assert await engine.fire_schedules() == 2  # no error for the one it does not serve
    # The others fired in the same pass, each once; the foreign one waits for its engine.
    assert [len(await runs_of(engine, i)) for i in ("plain", "lane", "foreign")] == [1, 1, 0]
    assert await owner.fire_schedules() == 1
    assert len(await runs_of(owner, "foreign")) == 1
    assert await engine.fire_schedules() == await owner.fire_schedules() == 0


async def test_a_new_definition_keeps_a_due_window_unless_its_timing_changed(
    make_engine: Any, clock: ManualClock
) -> None:
    [engine] = await engines(make_engine)
    await engine.schedules.upsert(Schedule("edit", "report", every=3600, input=1))
    clock.set(datetime(2026, 1, 1, 1, 0, 5, tzinfo=UTC))  # its window is due, not yet fired
    edited = await engine.schedules.upsert(Schedule("edit", "report", every=3600, input=2))
    assert edited.next_fire_at == datetime(2026, 1, 1, 1, tzinfo=UTC)
    await engine.tick()
    [run] = await runs_of(engine, "edit")
    assert (run.id, run.input) == ("sched:edit:20260101T010000Z", 2)
    retimed = await engine.schedules.upsert(Schedule("edit", "report", every=1800, input=2))
    assert retimed.next_fire_at == datetime(2026, 1, 1, 1, 30, tzinfo=UTC)
    assert retimed.last_run_id == run.id and retimed.created_at == START


# ---------------------------------------------------------------- overlap


async def _two_windows(make_engine: Any, clock: ManualClock, overlap: Any) -> Engine:
    [engine] = await engines(make_engine)
    await engine.schedules.upsert(Schedule("busy", "holder", every=60, overlap=overlap))
    for _ in range(3):
        clock.advance(60)
        await engine.tick()
    return engine


async def test_overlap_allow_starts_every_window(make_engine: Any, clock: ManualClock) -> None:
    engine = await _two_windows(make_engine, clock, "allow")
    assert [r.status for r in await runs_of(engine, "busy")] == [RunStatus.SUSPENDED] * 3


async def test_overlap_skip_starts_nothing_while_the_last_run_is_active(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await _two_windows(make_engine, clock, "skip")
    [only] = await runs_of(engine, "busy")
    assert only.id == "sched:busy:20260101T000100Z"
    state = await engine.schedules.get("busy")
    assert state is not None and state.last_error is not None
    assert state.last_error["type"] == "SingletonQueueFullError"
    assert state.last_error["window"] == "2026-01-01T00:03:00+00:00"
    await engine.signal(only.id, "done", 1)
    clock.advance(60)
    await engine.tick()
    assert len(await runs_of(engine, "busy")) == 2  # free again: the next window fires


async def test_overlap_buffer_one_keeps_one_run_waiting(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await _two_windows(make_engine, clock, "buffer_one")
    first, buffered = await runs_of(engine, "busy")
    assert [first.status, buffered.status] == [RunStatus.SUSPENDED, RunStatus.BLOCKED]
    state = await engine.schedules.get("busy")  # the third window was skipped, and recorded
    assert state is not None and state.last_error is not None
    assert state.last_error["window"] == "2026-01-01T00:03:00+00:00"
    await engine.signal(first.id, "done", 1)
    await engine.tick()
    promoted = await engine.get_run(buffered.id)
    assert promoted is not None and promoted.status == RunStatus.SUSPENDED  # its turn came


async def test_overlap_cancel_other_cancels_the_active_run(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await _two_windows(make_engine, clock, "cancel_other")
    statuses = [r.status for r in await runs_of(engine, "busy")]
    assert statuses == [RunStatus.CANCELLED, RunStatus.CANCELLED, RunStatus.SUSPENDED]


# ---------------------------------------------------------------- catch-up, pause, delete


@pytest.mark.parametrize(
    ("catchup", "fired"),
    [
        ("latest", ["20260101T001000Z"]),
        ("skip", []),
        ("all", ["20260101T000800Z", "20260101T000900Z", "20260101T001000Z"]),
    ],
)
async def test_windows_missed_while_no_engine_drove_the_schedule_follow_catchup(
    make_engine: Any, clock: ManualClock, catchup: Any, fired: list[str]
) -> None:
    [engine] = await engines(make_engine)
    await engine.schedules.upsert(
        Schedule("late", "report", every=60, catchup=catchup, max_catchup=3)
    )
    clock.advance(10 * 60)  # ten windows pass with nobody driving
    await engine.tick()
    assert [r.id.rsplit(":", 1)[1] for r in await runs_of(engine, "late")] == fired
    clock.set(datetime(2026, 1, 1, 0, 11, 1, tzinfo=UTC))  # driven again: on time
    await engine.tick()
    assert (await runs_of(engine, "late"))[-1].id == "sched:late:20260101T001100Z"


async def test_one_pass_works_out_each_schedules_windows_from_its_own_timing_and_window(
    make_engine: Any, clock: ManualClock
) -> None:
    """A pass works out the windows once per timing and awaited window: schedules alike in
    one of them and not the other each fire their own windows."""
    [engine] = await engines(make_engine)
    alike: dict[str, Any] = {"catchup": "all", "max_catchup": 3}
    await engine.schedules.upsert(Schedule("a", "report", every=60, **alike))
    await engine.schedules.upsert(Schedule("b", "report", every=60, catchup="all", max_catchup=2))
    await engine.schedules.upsert(Schedule("c", "report", every=120, **alike))
    await engine.schedules.upsert(Schedule("d", "report", cron="* * * * *", **alike))
    clock.advance(3 * 60)  # 00:03:30, nobody driving
    await engine.schedules.upsert(Schedule("e", "report", every=60, **alike))  # awaits 00:04
    clock.advance(2 * 60)  # 00:05:30: one pass fires them all
    assert await engine.fire_schedules() == 3 + 2 + 2 + 3 + 2

    async def fired(schedule_id: str) -> list[str]:
        return [r.id.rsplit(":", 1)[1][9:13] for r in await runs_of(engine, schedule_id)]

    expected = {
        "a": ["0003", "0004", "0005"],
        "b": ["0004", "0005"],
        "c": ["0002", "0004"],
        "d": ["0003", "0004", "0005"],
        "e": ["0004", "0005"],
    }
    assert {i: await fired(i) for i in "abcde"} == expected
    clock.advance(60)  # 00:06:30: every one is due at 00:06, on time
    assert await engine.fire_schedules() == 5
    assert {i: (await fired(i))[-1] for i in "abcde"} == dict.fromkeys("abcde", "0006")


async def test_windows_passed_while_paused_never_fire(make_engine: Any, clock: ManualClock) -> None:
    [engine] = await engines(make_engine)
    await engine.schedules.upsert(Schedule("p", "report", every=60))
    paused = await engine.schedules.pause("p")
    assert paused.paused and paused.next_fire_at is None
    clock.advance(5 * 60)
    await engine.tick()
    assert await runs_of(engine, "p") == []
    resumed = await engine.schedules.resume("p")
    assert resumed.next_fire_at == datetime(2026, 1, 1, 0, 6, tzinfo=UTC)
    clock.advance(60)
    await engine.tick()
    assert [r.id for r in await runs_of(engine, "p")] == ["sched:p:20260101T000600Z"]


async def test_trigger_starts_one_run_now_and_delete_stops_the_schedule(
    make_engine: Any, clock: ManualClock
) -> None:
    [engine] = await engines(make_engine)
    await engine.schedules.upsert(Schedule("t", "report", every=3600, input=7))
    run = await engine.schedules.trigger("t")
    assert run.id == "sched:t:manual:20260101T000030000000Z"
    assert "schedule:t" in run.tags and run.input == 7
    assert await engine.schedules.delete("t") is True
    assert await engine.schedules.delete("t") is False
    clock.advance(3600)
    await engine.tick()
    assert [r.id for r in await runs_of(engine, "t")] == [run.id]
    with pytest.raises(ScheduleNotFoundError):
        await engine.schedules.trigger("t")


# ---------------------------------------------------------------- quotas


async def test_a_window_refused_by_its_quota_is_recorded_and_the_next_one_fires(
    make_engine: Any, clock: ManualClock
) -> None:
    [engine] = await engines(make_engine)
    await engine.start(tenant_job, None, run_id="occupant")
    await engine.schedules.upsert(Schedule("q", "tenant-job", every=60))
    clock.advance(60)
    await engine.tick()
    assert await runs_of(engine, "q") == []
    state = await engine.schedules.get("q")
    assert state is not None and state.last_error is not None
    assert {k: state.last_error[k] for k in ("type", "key", "limit", "active", "window")} == {
        "type": "ConcurrencyLimitError",
        "key": "tenant:a",
        "limit": 1,
        "active": 1,
        "window": "2026-01-01T00:01:00+00:00",
    }
    await engine.signal("occupant", "done", 1)
    await engine.tick()
    clock.advance(60)
    await engine.tick()
    assert [r.id for r in await runs_of(engine, "q")] == ["sched:q:20260101T000200Z"]
    assert (await engine.schedules.get("q")).last_error is None  # type: ignore[union-attr]


async def test_a_schedules_own_quota_replaces_the_workflows(
    make_engine: Any, clock: ManualClock
) -> None:
    [engine] = await engines(make_engine)
    own = Concurrency(key="schedule-quota", limit=2)
    await engine.schedules.upsert(Schedule("own", "tenant-job", every=60, concurrency=own))
    for _ in range(3):
        clock.advance(60)
        await engine.tick()
    runs = await runs_of(engine, "own")
    assert len(runs) == 2 and {r.concurrency_key for r in runs} == {"schedule-quota"}


# ---------------------------------------------------------------- declared in code


async def test_declared_schedules_are_stored_when_the_engine_opens_and_a_pause_stands(
    make_engine: Any, clock: ManualClock
) -> None:
    declared = Schedule("declared", "report", every=60, input="from code")
    first = await make_engine(*WORKFLOWS, schedules=[declared])
    await first.tick()
    state = await first.schedules.get("declared")
    assert state is not None and state.input == "from code" and not state.paused
    await first.schedules.pause("declared")
    second = await make_engine(*WORKFLOWS, schedules=[declared])  # a restart, same code
    await second.tick()
    state = await second.schedules.get("declared")
    assert state is not None and state.paused


async def test_a_pause_the_code_declares_takes_effect_and_an_operators_resume_then_stands(
    make_engine: Any, clock: ManualClock
) -> None:
    running = Schedule("declared", "report", every=60)
    paused = Schedule("declared", "report", every=60, paused=True)

    async def restart(schedule: Schedule) -> Any:
        engine = await make_engine(*WORKFLOWS, schedules=[schedule])
        await engine.tick()
        return engine, await engine.schedules.get("declared")

    await restart(running)
    engine, state = await restart(paused)  # the code now pauses it
    assert state.paused and state.next_fire_at is None
    await engine.schedules.resume("declared")  # an operator resumes it
    engine, state = await restart(paused)  # a restart, same code
    assert not state.paused
    engine, state = await restart(running)  # the code agrees
    assert not state.paused
    engine, state = await restart(paused)  # the code pauses it again
    assert state.paused
