"""An app module for `runlane worker`: a remote step worker on Redis (prefix from the env), and
an engine built as a producer beside it."""

from __future__ import annotations

import os

import runlane
from runlane import Engine
from runlane.remote.worker import Worker
from runlane.transports import RedisTransport

PREFIX = os.environ.get("RUNLANE_TEST_PREFIX", "rl-e2e")
REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")


@runlane.step(name="billing.charge", group="billing")
def charge(order: dict[str, int]) -> dict[str, int]:
    return {"charged": order["amount"], "pid": os.getpid()}


@runlane.workflow(name="pay")
async def pay(ctx: runlane.Context, order: dict[str, int]) -> dict[str, int]:
    charged: dict[str, int] = await ctx.step(charge, order)
    return charged


def transport() -> RedisTransport:
    return RedisTransport(REDIS_URL, prefix=PREFIX)


billing = Worker(group="billing", transport=transport(), steps=[charge], heartbeat_interval=0.2)


def both() -> list[Engine | Worker]:
    """An engine built as a web process builds it (``drive=False, consumers="never"``; the store
    from ``RUNLANE_TEST_DB``) and the billing worker, for one process."""
    engine = Engine(
        os.environ["RUNLANE_TEST_DB"],
        transport=transport(),
        workflows=[pay],
        drive=False,
        consumers="never",
    )
    return [engine, billing]
