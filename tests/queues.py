"""The real backends of the run-queue tests: an emptied PostgreSQL database, and a transport
with a run queue (Redis, or the db transport on PostgreSQL) under a throw-away prefix."""

from __future__ import annotations

import os
from typing import Any

from runlane.stores import open_store
from runlane.transports import DbTransport, RedisTransport
from runlane.transports.base import Transport

REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE_KINDS = ["redis", "db"]


async def reset_postgres(url: str) -> None:
    """Empty runlane's tables in the session's test database."""
    store: Any = open_store(url)
    await store.open()
    await store.reset_for_tests()
    await store.close()


def queue_transport(kind: str, pg_url: str, prefix: str) -> Transport:
    if kind == "redis":
        return RedisTransport(REDIS_URL, prefix=prefix)
    return DbTransport(pg_url, prefix=prefix, poll_interval=0.2)


async def purge(transport: Any) -> None:
    """Delete every message under the transport's prefix."""
    await transport.open()
    await transport.purge()
    await transport.close()
