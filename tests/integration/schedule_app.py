"""One engine process of the schedule fleet test (see test_schedule_fleet.py).

python -m tests.integration.schedule_app PG_URL LOG -> an engine driving the every-second schedule "tick" until
SIGTERM; each run it executes appends "<run id> <pid>" to LOG.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import runlane
from runlane import Engine, Schedule
from runlane.stores.postgres import PostgresStore
from tests.servers import serve_until_terminated

LOG = sys.argv[2] if len(sys.argv) > 2 else os.devnull


@runlane.step(name="tick.record")
async def record(run_id: str) -> None:
    with open(LOG, "a") as log:
        log.write(f"{run_id} {os.getpid()}\n")


@runlane.workflow(name="tick.run")
async def tick(ctx: runlane.Context, _: Any) -> None:
    await ctx.step(record, ctx.run_id)


if __name__ == "__main__":
    engine = Engine(
        PostgresStore(sys.argv[1]),
        workflows=[tick],
        schedules=[Schedule("tick", "tick.run", every=1)],
        poll_interval=0.2,
    )
    asyncio.run(serve_until_terminated(engine))
