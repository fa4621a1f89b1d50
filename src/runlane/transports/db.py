"""The db transport: messages as rows, in PostgreSQL (many hosts) or SQLite (one host).

A message is a row of ``runlane_messages`` until a taker deletes it (``DELETE ... RETURNING``;
on PostgreSQL the rows are claimed ``FOR UPDATE SKIP LOCKED``), so each message goes to one
taker. Takers on PostgreSQL are woken by LISTEN/NOTIFY, one channel per queue, and poll every
``poll_interval`` as the fallback; on SQLite they poll. Heartbeats are broadcast: a NOTIFY on
PostgreSQL, rows every subscriber reads on SQLite. The tables are created at ``open()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from ..extras import needs_extra
from ..serialization import dumps, loads
from ..urls import redact
from .addresses import HEARTBEATS, RESULTS, qualified, run_queue, run_topic, task_queue
from .base import Message
from .mailboxes import Fanout, Feed, Wakeups, wait_event
from .messages import message_code

# (queue, topic, payload json, priority)
Row = tuple[str, str, str, int]
OnNotify = Callable[[str, str], None]


class MessageTable(Protocol):
    """What DbTransport needs from a database: rows in, rows out, notifications both ways."""

    poll_interval: float

    async def open(self, on_notify: OnNotify) -> None:
        """Connect and create the tables; ``on_notify(channel, payload)`` hears watched channels."""

    async def close(self) -> None: ...

    async def insert(self, rows: Sequence[Row], channels: Sequence[str]) -> None:
        """Insert every row and notify every channel, in one transaction."""

    async def claim(
        self, queues: Sequence[str], topics: Sequence[str], limit: int
    ) -> list[Message]:
        """Delete and return up to ``limit`` payloads of ``queues`` or ``topics``, urgent first."""

    async def watch(self, channels: Sequence[str]) -> None:
        """Make sure wake-ups of the queue ``channels`` reach ``on_notify`` from now on (a
        table that only polls does nothing)."""

    async def subscribe(self, channel: str) -> None:
        """Make sure broadcasts on ``channel`` reach ``on_notify`` from now on. Idempotent."""

    async def publish(self, channel: str, payload: str) -> None:
        """Broadcast ``payload`` to every watcher of ``channel``, in every process."""

    async def purge(self, prefix: str) -> None: ...


class DbTransport:
    has_run_queue = True

    def __init__(
        self, url: str, *, prefix: str = "runlane", poll_interval: float | None = None
    ) -> None:
        self.url = url
        self.prefix = prefix
        self._table = _table_for(url, poll_interval)
        self._wakeups = Wakeups()
        self._heartbeats = Fanout(self._listen_beats)
        self._opened = False
        self._opening = asyncio.Lock()
        self._closed = False

    def key(self, name: str) -> str:
        return qualified(self.prefix, name)

    async def open(self) -> None:
        # An engine and its in-process workers often share one transport and open it at
        # once: the second waits for the first instead of opening a second table.
        async with self._opening:
            if not self._opened:
                await self._table.open(self._on_notify)
                self._opened = True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wakeups.close()
        self._heartbeats.close()
        if self._opened:
            await self._table.close()

    async def purge(self) -> None:
        """Delete every message under this transport's prefix (tests, resets)."""
        await self._table.purge(self.key(""))

    # ---------------------------------------------------------------- sending

    async def enqueue_runs(self, messages: Sequence[Message]) -> None:
        rows = []
        for m in messages:
            code = message_code(m)
            queue, topic = self.key(run_queue(m.get("namespace"), code)), self.key(run_topic(code))
            rows.append((queue, topic, dumps(m), int(m.get("priority") or 0)))
        await self._insert(rows)

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        queue = self.key(task_queue(group))
        await self._insert([(queue, queue, dumps(t), 0) for t in tasks])

    async def send_result(self, result: Message) -> None:
        queue = self.key(RESULTS)
        await self._insert([(queue, queue, dumps(result), 0)])

    async def send_decision(self, queue: str, decision: Message) -> None:
        key = self.key(queue)
        await self._insert([(key, key, dumps(decision), 0)])

    async def _insert(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        channels = sorted({row[0] for row in rows} | {row[1] for row in rows})
        await self._table.insert(rows, channels)
        # Takers in this process need not wait for the database's notification (or SQLite's poll).
        for channel in channels:
            self._wakeups.notify(channel)

    # ---------------------------------------------------------------- taking

    async def take_runs(
        self,
        namespaces: Sequence[str | None] | None,
        codes: Sequence[str],
        max_items: int,
        timeout: float,
    ) -> list[Message]:
        if namespaces is None:
            topics = [self.key(run_topic(code)) for code in codes]
            return await self._take([], topics, max_items, timeout)
        queues = [self.key(run_queue(ns, code)) for ns in namespaces for code in codes]
        return await self._take(queues, [], max_items, timeout)

    async def take_tasks(self, group: str, max_items: int, timeout: float) -> list[Message]:
        return await self._take([self.key(task_queue(group))], [], max_items, timeout)

    async def take_results(self, max_items: int, timeout: float) -> list[Message]:
        return await self._take([self.key(RESULTS)], [], max_items, timeout)

    async def take_decisions(
        self, queues: Sequence[str], max_items: int, timeout: float
    ) -> list[Message]:
        return await self._take([self.key(q) for q in queues], [], max_items, timeout)

    async def _take(
        self, queues: list[str], topics: list[str], max_items: int, timeout: float
    ) -> list[Message]:
        if self._closed:
            return []
        deadline = time.monotonic() + timeout
        channels = [*queues, *topics]
        woken = self._wakeups.register(channels)
        try:
            await self._watch(channels, deadline)
            while not self._closed:
                # Cleared before the claim: a notification arriving after it is not missed.
                woken.clear()
                messages = await self._claim(queues, topics, max_items)
                remaining = deadline - time.monotonic()
                if messages or remaining <= 0:
                    return messages
                await wait_event(woken, min(remaining, self._table.poll_interval))
            return []
        finally:
            self._wakeups.unregister(woken)

    async def _watch(self, channels: list[str], deadline: float) -> None:
        # Past the deadline a take still claims once; a watch that is slow to start only
        # leaves the take on polling.
        remaining = max(0.0, deadline - time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._table.watch(channels), remaining)

    async def _claim(self, queues: list[str], topics: list[str], limit: int) -> list[Message]:
        if not queues and not topics:
            return []
        try:
            return await self._table.claim(queues, topics, limit)
        except Exception:
            if self._closed:
                return []
            raise

    # ---------------------------------------------------------------- heartbeats

    async def publish_heartbeat(self, beat: Message) -> None:
        await self._table.publish(self.key(HEARTBEATS), dumps(beat))

    def heartbeats(self) -> Feed:
        return self._heartbeats.feed()

    async def _listen_beats(self) -> None:
        await self._table.subscribe(self.key(HEARTBEATS))

    def _on_notify(self, channel: str, payload: str) -> None:
        if channel == self.key(HEARTBEATS):
            try:
                self._heartbeats.deliver(loads(payload))
            except ValueError:
                return
        else:
            self._wakeups.notify(channel)


def _table_for(url: str, poll_interval: float | None) -> MessageTable:
    if url.startswith("sqlite:"):
        from .db_sqlite import SqliteMessages

        return SqliteMessages(sqlite_path(url), poll_interval=poll_interval or 0.05)
    if url.startswith(("postgresql:", "postgres:")):
        with needs_extra("postgres", "DbTransport on PostgreSQL"):
            from .db_postgres import PostgresMessages

        return PostgresMessages(url, poll_interval=poll_interval or 2.0)
    raise ValueError(f"DbTransport needs a postgresql:// or sqlite:/// url, not {redact(url)!r}")


def sqlite_path(url: str) -> str:
    """``sqlite:///relative.db`` and ``sqlite:////absolute.db``, as SQLAlchemy spells them."""
    if not url.startswith("sqlite:///"):
        raise ValueError(f"a SQLite url looks like sqlite:///path/to/file.db, not {url!r}")
    return url[len("sqlite:///") :]


__all__ = ["DbTransport", "MessageTable"]
