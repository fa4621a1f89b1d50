"""SQLite rows for the db transport: several processes on one host, polling.

One connection per transport, used from threads through the one door into threads and guarded
by a lock; WAL and a busy timeout let several processes share the file.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from ..concurrency import run_in_thread
from ..serialization import dumps
from ..sqlfiles import named_statements, read
from ..sqlite_wal import use_wal
from .base import Message
from .db import OnNotify, Row
from .messages import decode_each

T = TypeVar("T")
BEAT_RETENTION = 60.0  # seconds a heartbeat row stays readable by slow pollers
PRUNE_EVERY = 100  # publishes between prunes


class SqliteMessages:
    def __init__(self, path: str, *, poll_interval: float) -> None:
        self.path = path
        self.poll_interval = poll_interval
        self._q = named_statements("runlane.transports", "sql", "sqlite_queries.sql")
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._on_notify: OnNotify = lambda channel, payload: None
        self._pollers: dict[str, asyncio.Task[None]] = {}
        self._published = 0

    async def open(self, on_notify: OnNotify) -> None:
        self._on_notify = on_notify
        self._conn = await run_in_thread(self._connect)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 30000")
        use_wal(conn, 30.0)
        conn.executescript(read("runlane.transports", "sql", "sqlite.sql"))
        return conn

    async def close(self) -> None:
        for poller in self._pollers.values():
            poller.cancel()
        await asyncio.gather(*self._pollers.values(), return_exceptions=True)
        if self._conn is not None:
            await self._run(lambda conn: conn.close())

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        if conn is None:
            raise RuntimeError("DbTransport is not open; call open() first")

        def locked() -> T:
            with self._lock:
                return fn(conn)

        return await run_in_thread(locked)

    async def _fetchall(self, query: str, params: Sequence[Any]) -> list[Any]:
        return await self._run(lambda conn: conn.execute(query, params).fetchall())

    async def insert(self, rows: Sequence[Row], channels: Sequence[str]) -> None:
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        params = [(*row, now) for row in rows]

        def insert(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.executemany(self._q["insert"], params)

        await self._run(insert)

    async def claim(
        self, queues: Sequence[str], topics: Sequence[str], limit: int
    ) -> list[Message]:
        names, topic_names = dumps(list(queues)), dumps(list(topics))

        def claim(conn: sqlite3.Connection) -> list[Any]:
            # A read first: an empty poll must not take SQLite's write lock.
            if conn.execute(self._q["peek"], (names, topic_names)).fetchone() is None:
                return []
            with _transaction(conn):
                return conn.execute(self._q["claim"], (names, topic_names, limit)).fetchall()

        rows = await self._run(claim)
        rows.sort(key=lambda row: (-row[1], row[0]))
        return decode_each((row[2] for row in rows), "message")

    async def publish(self, channel: str, payload: str) -> None:
        self._published += 1
        prune = self._published % PRUNE_EVERY == 1

        def publish(conn: sqlite3.Connection) -> None:
            conn.execute(self._q["publish"], (channel, payload, time.time()))
            if prune:
                conn.execute(self._q["prune_beats"], (time.time() - BEAT_RETENTION,))

        await self._run(publish)

    async def purge(self, prefix: str) -> None:
        def purge(conn: sqlite3.Connection) -> None:
            conn.execute(self._q["purge"], (prefix,))
            conn.execute(self._q["purge_beats"], (prefix,))

        await self._run(purge)

    async def watch(self, channels: Sequence[str]) -> None:
        return None  # message queues are polled by their takers

    async def subscribe(self, channel: str) -> None:
        if channel not in self._pollers:
            ((last,),) = await self._fetchall(self._q["last_beat"], ())
            if channel not in self._pollers:
                self._pollers[channel] = asyncio.create_task(self._poll_beats(channel, last))

    async def _poll_beats(self, channel: str, last: int) -> None:
        query = self._q["read_beats"]
        while True:
            rows = await self._fetchall(query, (channel, last))
            for beat_id, payload in rows:
                last = beat_id
                self._on_notify(channel, payload)
            await asyncio.sleep(self.poll_interval)


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error (the connection is in autocommit mode)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")


__all__ = ["SqliteMessages"]
