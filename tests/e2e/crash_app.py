"""A process that runs steps on SQLite and can be killed mid-way (used by test_crash_recovery).

Usage: python crash_app.py DB LOG RUNS
Each step appends "<run> <step>" to LOG before returning, then the process keeps driving until
every run completes. The test SIGKILLs it part-way and starts it again.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import runlane
from runlane import Engine
from runlane.stores.sqlite import SqliteStore

DB, LOG, RUNS = sys.argv[1], sys.argv[2], int(sys.argv[3])


@runlane.step(name="work")
def work(input: dict[str, Any]) -> str:
    time.sleep(0.02)
    with open(LOG, "a") as log:
        log.write(f"{input['run']} {input['step']}\n")
    return f"{input['run']}:{input['step']}"


@runlane.workflow(name="five-steps")
async def five_steps(ctx: runlane.Context, run: str) -> list[str]:
    done = []
    for n in range(5):
        done.append(await ctx.step(work, {"run": run, "step": n}))
    return done


async def main() -> None:
    engine = Engine(SqliteStore(DB), workflows=[five_steps], poll_interval=0.05, lease=1.0)
    async with engine:
        for n in range(RUNS):
            await engine.start(five_steps, f"r{n}", run_id=f"r{n}")
        for n in range(RUNS):
            await engine.wait_for_run(f"r{n}", timeout=60)
    print("ALL DONE", flush=True)


asyncio.run(main())
