"""One member of a test fleet, run as its own process (see test_fleet_processes.py).

python -m tests.integration.fleet_app engine PG_URL TRANSPORT PREFIX LOG   -> an engine, until SIGTERM
python -m tests.integration.fleet_app worker PG_URL TRANSPORT PREFIX LOG   -> a worker, until SIGTERM
TRANSPORT is "none", "redis" or "db". Every step execution appends "<run> <seq> <pid>" to LOG.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from typing import Any

import runlane
from runlane import Engine
from runlane.remote.worker import Worker
from runlane.stores import open_store
from runlane.transports import DbTransport, RedisTransport
from runlane.transports.base import Transport
from tests.servers import serve_until_terminated

REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")
LOG = sys.argv[5] if len(sys.argv) > 5 else os.devnull


def _log(run_id: str, seq: int) -> None:
    with open(LOG, "a") as log:
        log.write(f"{run_id} {seq} {os.getpid()}\n")


@runlane.step(name="fleet.local")
async def local(args: list[Any]) -> str:
    _log(args[0], args[1])
    await asyncio.sleep(0.005)
    return f"{args[0]}:{args[1]}"


# A result is taken off the transport once; one taken by an engine that is then killed is lost,
# the attempt falls silent and is retried, as a dead worker's would be.
@runlane.step(name="fleet.remote", group="fleet", timeout=3.0, retry=runlane.Retry(max_attempts=3))
async def remote(args: list[Any]) -> str:
    _log(args[0], args[1])
    await asyncio.sleep(0.01)
    return f"{args[0]}:{args[1]}:remote"


@runlane.workflow(name="fleet.three")
async def three(ctx: runlane.Context, _: Any) -> list[str]:
    return [await ctx.step(local, [ctx.run_id, seq]) for seq in (1, 2, 3)]


@runlane.workflow(name="fleet.mixed")
async def mixed(ctx: runlane.Context, _: Any) -> list[str]:
    first = await ctx.step(local, [ctx.run_id, 1])
    second = await ctx.step(remote, [ctx.run_id, 2])
    return [first, second]


@runlane.step(name="fleet.slow")
async def slow(args: list[Any]) -> None:
    _log(args[0], args[1])
    # Spread over time, so that an engine killed as the first runs fail holds runs settling
    # and runs still in their step.
    await asyncio.sleep(random.uniform(0.05, 0.5))


@runlane.workflow(name="fleet.alert")
async def alert(ctx: runlane.Context, info: dict[str, Any]) -> str:
    return str(await ctx.step(local, [ctx.run_id, 1]))


@runlane.workflow(name="fleet.fails", on_failure=alert)
async def fails(ctx: runlane.Context, _: Any) -> None:
    await ctx.step(slow, [ctx.run_id, 1])
    raise ValueError(f"{ctx.run_id} fails")


def transport(kind: str, pg_url: str, prefix: str) -> Transport | None:
    if kind == "redis":
        return RedisTransport(REDIS_URL, prefix=prefix)
    if kind == "db":
        return DbTransport(pg_url, prefix=prefix, poll_interval=0.2)
    return None


async def serve(role: str, pg_url: str, kind: str, prefix: str) -> None:
    if role == "worker":
        w = Worker(
            group="fleet",
            transport=transport(kind, pg_url, prefix) or _none(),
            steps=[remote],
            heartbeat_interval=0.3,
        )
        await serve_until_terminated(w)
        return
    engine = Engine(
        open_store(pg_url),
        transport=transport(kind, pg_url, prefix),
        workflows=[three, mixed, fails, alert],
        steps=[local, remote, slow],
        lease=5.0,
        poll_interval=0.1,
        # A task, beat or result the killed engine took off the transport is lost with it; a
        # run whose remote step heard nothing yet re-sends it after this, not after the
        # reconcile interval (5 minutes by default, longer than the test waits).
        remote_redispatch=5.0,
    )
    await serve_until_terminated(engine)


def _none() -> Transport:
    raise SystemExit("a worker needs a transport")


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]))
