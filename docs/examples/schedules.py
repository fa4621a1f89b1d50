"""Schedules: a cron in a time zone, an interval, and managing them at run time."""

import asyncio
from datetime import UTC, datetime

import runlane
from runlane import Engine, Schedule
from runlane.stores import MemoryStore
from runlane.testing import ManualClock


@runlane.workflow(name="report")
async def report(ctx: runlane.Context, input: dict) -> str:
    return f"{input['kind']} report"


@runlane.workflow(name="poll")
async def poll(ctx: runlane.Context, input: None) -> str:
    return "polled"


# Declared in code: every engine that has it keeps the schedule's row up to date.
nightly = Schedule(
    "nightly-report", report, cron="0 3 * * *", timezone="Europe/Berlin",
    input={"kind": "daily"}, overlap="skip",
)  # fmt: skip


async def main() -> None:
    clock = ManualClock(datetime(2026, 3, 1, 1, 30, tzinfo=UTC))  # 02:30 in Berlin
    engine = Engine(
        MemoryStore(), workflows=[report, poll], schedules=[nightly], clock=clock, drive=False
    )
    async with engine:
        await engine.schedules.upsert(Schedule("poll", poll, every=300))  # at run time
        clock.advance(60 * 60)  # 03:30 in Berlin: the nightly window and the polls have come
        await engine.tick()
        reports = await engine.list_runs(workflow="report")
        assert [run.output for run in reports] == ["daily report"], reports

        await engine.schedules.pause("poll")  # windows that pass while paused never fire
        polled = len(await engine.list_runs(workflow="poll"))
        clock.advance(900)
        await engine.tick()
        assert len(await engine.list_runs(workflow="poll")) == polled
        await engine.schedules.resume("poll")  # from the first window after now

        run = await engine.schedules.trigger("nightly-report")  # one run now, off schedule
        assert run.workflow == "report"


if __name__ == "__main__":
    asyncio.run(main())
