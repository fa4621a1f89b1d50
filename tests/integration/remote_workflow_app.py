"""A worker process for remote workflow turns, on Redis (prefix from the environment).

`runlane worker remote_workflow_app:worker` runs it; ``RUNLANE_TEST_MARKS`` names a directory
where each local step leaves a file per execution, so a test can tell what ran where.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import runlane
from runlane.transports import RedisTransport

PREFIX = os.environ.get("RUNLANE_TEST_PREFIX", "rl-remote-wf")
REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")
MARKS = Path(os.environ.get("RUNLANE_TEST_MARKS", "/tmp"))


def mark(name: str) -> None:
    (MARKS / f"{name}.{os.getpid()}.{os.urandom(4).hex()}").touch()


@runlane.step(name="app.prepare")
async def prepare(seconds: float) -> int:
    mark("prepare-started")
    await asyncio.sleep(seconds)
    mark("prepare-done")
    return os.getpid()


@runlane.step(name="app.charge", group="billing")
def charge(amount: int) -> dict[str, int]:
    mark("charge")
    return {"charged": amount}


@runlane.workflow(name="order", group="orders")
async def order(ctx: runlane.Context, input: dict[str, Any]) -> dict[str, Any]:
    pid = await ctx.step(prepare, input["prepare"])
    paid = await ctx.step(charge, input["amount"])
    said = await ctx.wait_for_signal("ship")
    return {"prepared_by": pid, **paid, "said": said}


def transport() -> RedisTransport:
    return RedisTransport(REDIS_URL, prefix=PREFIX)


worker = [
    runlane.Worker(
        "orders",
        transport(),
        workflows=[order],
        steps=[prepare],
        heartbeat_interval=0.2,
        poll_timeout=0.2,
    ),
    runlane.Worker(
        "billing", transport(), steps=[charge], heartbeat_interval=0.2, poll_timeout=0.2
    ),
]
