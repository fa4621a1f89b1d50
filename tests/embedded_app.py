"""A two-step workflow on SQLite, run as a script: what a bare ``pip install runlane`` runs.

Usage: ``python embedded_app.py PATH.db``. Prints one JSON object: the run's status and output,
and the top-level modules the process imported (the test kit and the CLI are imported too, so
the check covers them).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import runlane
import runlane.cli
import runlane.testing
from runlane import Engine
from runlane.stores import SqliteStore


@runlane.step(name="embedded.double")
def double(n: int) -> int:
    return n * 2


@runlane.step(name="embedded.describe")
async def describe(n: int) -> dict[str, Any]:
    return {"doubled": n}


@runlane.workflow(name="embedded")
async def embedded(ctx: runlane.Context, n: int) -> Any:
    doubled = await ctx.step(double, n)
    return await ctx.step(describe, doubled)


async def main(path: str) -> dict[str, Any]:
    async with Engine(SqliteStore(path), workflows=[embedded], poll_interval=0.05) as engine:
        await engine.start(embedded, 21, run_id="embedded-1")
        run = await engine.wait_for_run("embedded-1", timeout=30)
    return {
        "status": str(run.status),
        "output": run.output,
        "modules": sorted({name.partition(".")[0] for name in sys.modules}),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
