"""A process racing replace starts at one singleton key (the replace race test spawns several).

python replace_race_app.py URL STARTS PROC AT  -> from the wall-clock moment AT (seconds since
                                                  the epoch), fires STARTS concurrent starts of
                                                  ``race.latest`` and prints "started=<n>"
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import runlane
from runlane import Engine, Singleton
from runlane.stores import open_store


@runlane.workflow(name="race.latest", singleton=Singleton(key=lambda i: "race", on_busy="replace"))
async def latest(ctx: runlane.Context, i: Any) -> Any:
    return await ctx.wait_for_signal("done")


async def race(url: str, starts: int, proc: str, at: float) -> None:
    engine = Engine(open_store(url), workflows=[latest], drive=False)
    async with engine:
        await engine.get_run("warm-up")  # connected before the moment comes
        await asyncio.sleep(max(0.0, at - time.time()))
        runs = await asyncio.gather(
            *(engine.start(latest, None, run_id=f"r{proc}-{n:02d}") for n in range(starts))
        )
    print(f"started={len(runs)}", flush=True)


if __name__ == "__main__":
    url, starts, proc, at = sys.argv[1:5]
    asyncio.run(race(url, int(starts), proc, float(at)))
