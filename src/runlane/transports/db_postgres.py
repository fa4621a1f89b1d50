"""PostgreSQL rows for the db transport: a connection pool for claims, one connection to LISTEN.

The URL may list several hosts (``runlane.urls.writable_conninfo``): every connection reaches
the primary, and after a failover the reconnects reach the promoted standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Sequence

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from ..sqlfiles import named_statements, read
from ..urls import writable_conninfo
from .base import Message
from .db import OnNotify, Row

log = logging.getLogger(__name__)

# psycopg's notifies() holds the connection, so LISTEN requests wait for the next slice.
LISTEN_SLICE = 0.1
MAX_CHANNEL = 63  # NAMEDATALEN - 1: PostgreSQL refuses longer channel names
POOL_MAX = 10  # connections per transport, beside the LISTEN connection


def pg_channel(name: str) -> str:
    """The NOTIFY channel of a queue: its name, or a digest when the name is too long."""
    if len(name.encode()) <= MAX_CHANNEL:
        return name
    return "runlane#" + hashlib.sha256(name.encode()).hexdigest()[:48]


class PostgresMessages:
    def __init__(self, url: str, *, poll_interval: float) -> None:
        self.url = url
        self.conninfo = writable_conninfo(url)
        self.poll_interval = poll_interval
        self._q = named_statements("runlane.transports", "sql", "postgres_queries.sql")
        self._pool: AsyncConnectionPool | None = None
        self._listener: asyncio.Task[None] | None = None
        self._on_notify: OnNotify = lambda channel, payload: None
        self._names: dict[str, str] = {}  # pg channel -> logical channel
        self._listening: set[str] = set()
        self._requests: list[tuple[list[str], asyncio.Future[None]]] = []
        self._relisten = False  # the LISTEN connection's server turned read-only: reconnect

    @property
    def pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise RuntimeError("DbTransport is not open; call open() first")
        return self._pool

    async def open(self, on_notify: OnNotify) -> None:
        self._on_notify = on_notify
        # At most POOL_MAX connections beside the LISTEN one: 4 starved a worker's takes for
        # 30 s in the killed-engine fleet test, so a fleet's count is sized on the server side.
        pool = AsyncConnectionPool(
            self.conninfo, min_size=1, max_size=POOL_MAX, kwargs={"autocommit": True}, open=False
        )
        await pool.open(wait=True)
        self._pool = pool
        async with self._connection() as conn, conn.transaction():
            # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalog.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('runlane_messages'))")
            await conn.execute(read("runlane.transports", "sql", "postgres.sql").encode())
        self._listener = asyncio.create_task(self._listen_forever())

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
        for _, future in self._requests:
            if not future.done():
                future.set_result(None)
        if self._pool is not None:
            await self._pool.close()

    async def insert(self, rows: Sequence[Row], channels: Sequence[str]) -> None:
        params = {
            "queues": [r[0] for r in rows],
            "topics": [r[1] for r in rows],
            "payloads": [r[2] for r in rows],
            "priorities": [r[3] for r in rows],
            "channels": [pg_channel(c) for c in channels],
        }
        async with self._connection() as conn:
            await conn.execute(self._q["insert"].encode(), params)

    async def claim(
        self, queues: Sequence[str], topics: Sequence[str], limit: int
    ) -> list[Message]:
        params = {"queues": list(queues), "topics": list(topics), "limit": limit}
        async with self._connection() as conn:
            cursor = await conn.execute(self._q["claim"].encode(), params)
            rows = await cursor.fetchall()
        # RETURNING keeps no order: restore urgent first, oldest first.
        rows.sort(key=lambda row: (-row[1], row[0]))
        return [row[2] for row in rows]

    async def publish(self, channel: str, payload: str) -> None:
        async with self._connection() as conn:
            await conn.execute(
                self._q["publish"].encode(), {"channel": pg_channel(channel), "payload": payload}
            )

    async def purge(self, prefix: str) -> None:
        async with self._connection() as conn:
            await conn.execute(self._q["purge"].encode(), {"prefix": prefix})

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """A pooled connection. A write refused as read-only means its server was demoted (or
        fenced) while the pool held connections to it: ``target_session_attrs`` is checked only
        when a connection is made, so every one is replaced, the LISTEN one too."""
        try:
            async with self.pool.connection() as conn:
                yield conn
        except pg_errors.ReadOnlySqlTransaction:
            self._relisten = True
            await self.pool.drain()
            raise

    async def watch(self, channels: Sequence[str]) -> None:
        missing = [c for c in channels if c not in self._listening]
        if not missing:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._requests.append((missing, future))
        await asyncio.shield(future)

    async def subscribe(self, channel: str) -> None:
        await self.watch([channel])

    async def _listen_forever(self) -> None:
        while True:
            try:
                await self._listen_once()
            except psycopg.Error as exc:
                # Takers keep polling meanwhile; nothing is lost, only latency.
                log.warning("runlane db transport: LISTEN connection lost (%s); reconnecting", exc)
                await asyncio.sleep(self.poll_interval)

    async def _listen_once(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
            self._relisten = False
            for channel in sorted(self._listening):
                await self._listen(conn, channel)
            while not self._relisten:
                await self._serve_requests(conn)
                async for note in conn.notifies(timeout=LISTEN_SLICE):
                    self._on_notify(self._names.get(note.channel, note.channel), note.payload)

    async def _serve_requests(self, conn: psycopg.AsyncConnection) -> None:
        requests, self._requests = self._requests, []
        for channels, future in requests:
            for channel in channels:
                if channel not in self._listening:
                    await self._listen(conn, channel)
                    self._listening.add(channel)
            if not future.done():
                future.set_result(None)

    async def _listen(self, conn: psycopg.AsyncConnection, channel: str) -> None:
        name = pg_channel(channel)
        self._names[name] = channel
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))


__all__ = ["PostgresMessages", "pg_channel"]
