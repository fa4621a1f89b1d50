"""Transports: how engine instances and workers hand each other runs, tasks, results and beats."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..extras import lazy_names, needs_extra
from ..urls import redact
from .base import HeartbeatFeed, Message, Transport
from .db import DbTransport
from .inprocess import InProcessTransport

if TYPE_CHECKING:
    from .redis import RedisTransport


def open_transport(url: str | None = None, **options: Any) -> Transport:
    """A transport for ``url``; ``options`` go to its constructor (e.g. ``prefix=``).

    ``memory://`` or ``inprocess://``: InProcessTransport; ``redis://`` (or ``rediss://``):
    RedisTransport; ``postgresql://`` or ``sqlite:///path``: DbTransport. Without a url,
    ``RUNLANE_REDIS_URL`` if set, else the in-process transport. The transport is not opened.
    """
    url = url or os.environ.get("RUNLANE_REDIS_URL") or "memory://"
    if url.startswith(("memory:", "inprocess:")):
        return InProcessTransport()
    if url.startswith(("redis:", "rediss:", "unix:")):
        with needs_extra("redis", "RedisTransport"):
            from .redis import RedisTransport

        return RedisTransport(url, **options)
    if url.startswith(("postgresql:", "postgres:", "sqlite:")):
        return DbTransport(url, **options)
    raise ValueError(
        f"unsupported transport url {redact(url)!r}; "
        "use memory://, redis://, postgresql:// or sqlite:///"
    )


# RedisTransport imports redis only when asked for; DbTransport imports psycopg when it opens
# on PostgreSQL.
__getattr__ = lazy_names(__name__, {"RedisTransport": (".redis", "redis")})

__all__ = [
    "DbTransport",
    "HeartbeatFeed",
    "InProcessTransport",
    "Message",
    "RedisTransport",
    "Transport",
    "open_transport",
]
