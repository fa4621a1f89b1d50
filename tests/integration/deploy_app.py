"""One member of the rolling-deploy fleet (test_rolling_deploy.py), on the code of a release.

python -m tests.integration.deploy_app ROLE RELEASE PG_URL REDIS_URL PREFIX LOG

ROLE is ``engine`` or ``worker``, RELEASE ``1`` or ``2``. Release 2 changes the code three
ways while runs of release 1 are in flight: ``deploy.order`` (and the remote workflow
``deploy.remote``) gains a step behind ``ctx.patched("audit")``; ``deploy.report`` gains a
version 2 (release 1 has version 1 only); ``deploy.fresh`` exists only in release 2. Every
step execution appends ``<run> <label> <pid> <release> <start> <end>`` to LOG.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

import runlane
from runlane import Engine, RemoteWorkflow, Singleton
from runlane.remote.worker import Worker
from runlane.stores.postgres import PostgresStore
from runlane.transports import RedisTransport
from tests.servers import serve_until_terminated

GROUP = "deploy-wf"
STEPS_GROUP = "deploy-steps"
LOG = sys.argv[6] if len(sys.argv) > 6 else os.devnull
RELEASE = sys.argv[2] if len(sys.argv) > 2 else "1"


async def _effect(args: list[Any], seconds: float) -> str:
    run_id, label = args
    start = time.time()
    await asyncio.sleep(seconds)
    with open(LOG, "a") as log:
        log.write(f"{run_id} {label} {os.getpid()} {RELEASE} {start:.6f} {time.time():.6f}\n")
    return f"{label}@{RELEASE}"


@runlane.step(name="deploy.local")
async def local(args: list[Any]) -> str:
    return await _effect(args, 0.02)


@runlane.step(name="deploy.held")
async def held(args: list[Any]) -> str:
    """A step inside a singleton lane: long enough that two holders would overlap."""
    return await _effect(args, 0.2)


@runlane.step(name="deploy.charge", group=STEPS_GROUP, timeout=5.0)
async def charge(args: list[Any]) -> str:
    return await _effect(args, 0.02)


# ---------------------------------------------------------------- release 1


@runlane.workflow(name="deploy.order")
async def order_1(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    await ctx.step(local, [ctx.run_id, "reserve"])
    await ctx.sleep(0.3)
    said = await ctx.wait_for_signal("go")
    await ctx.step(charge, [ctx.run_id, "charge"])
    return {"branch": "old", "said": said}


@runlane.workflow(name="deploy.remote", group=GROUP)
async def remote_1(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    await ctx.step(local, [ctx.run_id, "reserve"])
    await ctx.sleep(0.3)
    await ctx.step(charge, [ctx.run_id, "charge"])
    return {"branch": "old"}


@runlane.workflow(name="deploy.report", version="1")
async def report_1(ctx: runlane.Context, _: Any) -> str:
    await ctx.step(local, [ctx.run_id, "report"])
    return "report 1"


def _lane(input: Any) -> str:
    return str(input["lane"])


@runlane.workflow(name="deploy.lane", singleton=Singleton(key=_lane))
async def lane(ctx: runlane.Context, input: Any) -> str:
    await ctx.step(held, [ctx.run_id, "enter"])
    await ctx.sleep(0.1)
    await ctx.step(held, [ctx.run_id, "leave"])
    return "done"


# ---------------------------------------------------------------- release 2


@runlane.workflow(name="deploy.order")
async def order_2(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    await ctx.step(local, [ctx.run_id, "reserve"])
    branch = "old"
    if ctx.patched("audit"):
        await ctx.step(local, [ctx.run_id, "audit"])
        branch = "patched"
    await ctx.sleep(0.3)
    said = await ctx.wait_for_signal("go")
    await ctx.step(charge, [ctx.run_id, "charge"])
    return {"branch": branch, "said": said}


@runlane.workflow(name="deploy.remote", group=GROUP)
async def remote_2(ctx: runlane.Context, _: Any) -> dict[str, Any]:
    await ctx.step(local, [ctx.run_id, "reserve"])
    branch = "old"
    if ctx.patched("audit"):
        await ctx.step(local, [ctx.run_id, "audit"])
        branch = "patched"
    await ctx.sleep(0.3)
    await ctx.step(charge, [ctx.run_id, "charge"])
    return {"branch": branch}


@runlane.workflow(name="deploy.report", version="2")
async def report_2(ctx: runlane.Context, _: Any) -> str:
    await ctx.step(local, [ctx.run_id, "report"])
    await ctx.step(local, [ctx.run_id, "summary"])
    return "report 2"


@runlane.workflow(name="deploy.fresh")
async def fresh(ctx: runlane.Context, _: Any) -> str:
    await ctx.step(local, [ctx.run_id, "fresh"])
    return "fresh"


RELEASES: dict[str, list[Any]] = {
    "1": [order_1, report_1, lane],
    "2": [order_2, report_1, report_2, lane, fresh],
}
WORKERS = {"1": [remote_1], "2": [remote_2]}


def engine(release: str, pg_url: str, redis_url: str, prefix: str, **options: Any) -> Engine:
    return Engine(
        PostgresStore(pg_url),
        transport=RedisTransport(redis_url, prefix=prefix),
        workflows=RELEASES[release],
        steps=[local, held, charge],
        remote_workflows=[RemoteWorkflow("deploy.remote", group=GROUP)],
        **options,
    )


def workers(release: str, redis_url: str, prefix: str) -> list[Worker]:
    transport = RedisTransport(redis_url, prefix=prefix)
    return [
        Worker(GROUP, transport, workflows=WORKERS[release], steps=[local], heartbeat_interval=0.3),
        Worker(STEPS_GROUP, transport, steps=[charge], heartbeat_interval=0.3),
    ]


async def _serve_workers(crew: list[Worker]) -> None:
    """Both workers of the process until SIGTERM; then they finish what they hold."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    running = [asyncio.create_task(w.run()) for w in crew]
    print("READY", flush=True)
    await stop.wait()
    for worker in crew:
        await worker.stop()
    await asyncio.gather(*running)


async def main(role: str, release: str, pg_url: str, redis_url: str, prefix: str) -> None:
    if role == "worker":
        await _serve_workers(workers(release, redis_url, prefix))
    else:
        await serve_until_terminated(
            engine(release, pg_url, redis_url, prefix, lease=3.0, poll_interval=0.2)
        )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
