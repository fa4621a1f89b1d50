"""One member of the outage tests' fleet, run as its own process (see test_outage_fleet.py).

python -m tests.integration.outage_app engine PG_URL REDIS_URL PREFIX LOG   -> an engine, until SIGTERM
python -m tests.integration.outage_app worker PG_URL REDIS_URL PREFIX LOG   -> a worker, until SIGTERM

Every step execution appends ``<run> <seq> <pid> <kind> <start> <end>`` to LOG.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

import runlane
from runlane import Engine, Retry, Singleton
from runlane.remote.worker import Worker
from runlane.stores.postgres import PostgresStore
from runlane.transports import RedisTransport
from tests.servers import serve_until_terminated

LOG = sys.argv[5] if len(sys.argv) > 5 else os.devnull


async def _execute(args: list[Any], kind: str, seconds: float) -> str:
    start = time.time()
    await asyncio.sleep(seconds)
    with open(LOG, "a") as log:
        log.write(f"{args[0]} {args[1]} {os.getpid()} {kind} {start:.6f} {time.time():.6f}\n")
    return f"{args[0]}:{args[1]}"


@runlane.step(name="o.local")
async def local(args: list[Any]) -> str:
    return await _execute(args, "local", 0.02)


@runlane.step(name="o.critical")
async def critical(args: list[Any]) -> str:
    return await _execute(args, "critical", 0.02)


@runlane.step(name="o.remote", group="o", timeout=3.0, retry=Retry(max_attempts=5, backoff=0.2))
async def remote(args: list[Any]) -> str:
    return await _execute(args, "remote", 0.02)


@runlane.workflow(name="o.plain")
async def plain(ctx: runlane.Context, _: Any) -> list[str]:
    return [await ctx.step(local, [ctx.run_id, seq]) for seq in (1, 2, 3)]


@runlane.workflow(name="o.keyed", singleton=Singleton(key=lambda _: "k"))
async def keyed(ctx: runlane.Context, _: Any) -> list[str]:
    first = await ctx.step(local, [ctx.run_id, 1])
    second = await ctx.step(critical, [ctx.run_id, 2])
    return [first, second, await ctx.step(local, [ctx.run_id, 3])]


@runlane.workflow(name="o.remote")
async def mixed(ctx: runlane.Context, _: Any) -> list[str]:
    first = await ctx.step(local, [ctx.run_id, 1])
    second = await ctx.step(remote, [ctx.run_id, 2])
    return [first, second, await ctx.step(local, [ctx.run_id, 3])]


WORKFLOWS = [plain, keyed, mixed]


def engine(pg_url: str, redis_url: str, prefix: str, **options: Any) -> Engine:
    return Engine(
        PostgresStore(pg_url),
        transport=RedisTransport(redis_url, prefix=prefix),
        workflows=WORKFLOWS,
        steps=[local, critical, remote],
        **options,
    )


async def serve(role: str, pg_url: str, redis_url: str, prefix: str) -> None:
    if role == "worker":
        transport = RedisTransport(redis_url, prefix=prefix)
        await serve_until_terminated(Worker("o", transport, steps=[remote], heartbeat_interval=0.3))
        return
    # A short lease, so a turn that could give nothing back is recovered within the test; a
    # remote task nobody took (lost with a restarted Redis) is sent again after 3 s.
    await serve_until_terminated(
        engine(pg_url, redis_url, prefix, lease=3.0, poll_interval=0.1, remote_redispatch=3.0)
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(serve(*sys.argv[1:5]))
