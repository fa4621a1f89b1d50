"""A process whose one run kills it in every turn (used by test_crash_recovery).

Usage: python poison_app.py DB LOG
The run's step appends the process id to LOG, then SIGKILLs its own process. The test starts
the process again after each death; once the run has been recovered past
``max_recovery_attempts`` the engine declares it dead, its dead-letter handler runs, and the
process prints what the handler returned.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import runlane
from runlane import Engine
from runlane.stores.sqlite import SqliteStore

DB, LOG = sys.argv[1], sys.argv[2]
MAX_RECOVERY_ATTEMPTS = 2


@runlane.step(name="poison.crash")
def crash(run_id: str) -> None:
    with open(LOG, "a") as log:
        log.write(f"{run_id} {os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)


@runlane.workflow(name="poison.bury")
async def bury(ctx: runlane.Context, failure: dict[str, Any]) -> str:
    return f"buried {failure['run_id']} ({failure['status']}, {failure['error']['type']})"


@runlane.workflow(name="poison.order", dead_letter=bury)
async def order(ctx: runlane.Context, input: Any) -> str:
    await ctx.step(crash, ctx.run_id)
    return "survived"


async def main() -> None:
    engine = Engine(
        SqliteStore(DB),
        workflows=[order],
        poll_interval=0.05,
        lease=0.5,
        max_recovery_attempts=MAX_RECOVERY_ATTEMPTS,
    )
    async with engine:
        await engine.start(order, None, run_id="poison")  # the same run after a restart
        run = await engine.wait_for_run("poison", timeout=60)
        handler = await engine.wait_for_run("poison.failure.1", timeout=60)
    print("SETTLED", run.status, "|", handler.status, handler.output, flush=True)


asyncio.run(main())
