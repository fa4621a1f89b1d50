"""The SQLite store's step queue tables, as a ``step_queues.QueueBook`` inside one unit of work.

The rules are :func:`runlane.step_queues.admit` and :func:`runlane.step_queues.release`; this module only
reads and writes the rows they ask for. Every unit of work already holds the file's write lock
(``BEGIN IMMEDIATE``), so the queue row needs no lock of its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from ...models import QueueSettings
from ...serialization import dumps
from ...step_queues import (
    QueueEntry,
    QueueRequest,
    QueueRow,
    QueueView,
    entry_from,
    row_from,
    views_of,
)
from .rows import from_opt_ts, ts
from .statements import SQL

Conn = sqlite3.Connection


def register_queues(conn: Conn, settings: Sequence[QueueSettings], now: datetime) -> None:
    for given in settings:
        conn.execute(
            SQL["register_queue"],
            (
                given.name,
                given.concurrency,
                given.rate_limit,
                given.rate_period,
                given.fairness,
                given.order,
                ts(now),
            ),
        )


def _row(row: sqlite3.Row) -> QueueRow:
    return row_from(row, from_opt_ts(row["window_start"]))


def _entry(row: sqlite3.Row) -> QueueEntry:
    return entry_from(row, from_opt_ts(row["admitted_at"]))


def queue_views(conn: Conn) -> list[QueueView]:
    rows = [_row(r) for r in conn.execute(SQL["all_queues"])]
    entries = [_entry(r) for r in conn.execute(SQL["live_queue_entries"])]
    keys = conn.execute(SQL["queue_keys"])
    return views_of(rows, entries, {(q, k): n for q, k, n in keys})


class SqliteQueues:
    """The queue tables on one connection, inside the caller's transaction."""

    def __init__(self, conn: Conn, wake: Callable[[Conn, str, datetime], bool]) -> None:
        self._conn = conn
        self._wake = wake

    def queue(self, name: str) -> QueueRow | None:
        row = self._conn.execute(SQL["get_queue"], (name,)).fetchone()
        return None if row is None else _row(row)

    def entry(self, run_id: str, seq: int) -> QueueEntry | None:
        row = self._conn.execute(SQL["get_queue_entry"], (run_id, seq)).fetchone()
        return None if row is None else _entry(row)

    def add_entry(self, run_id: str, request: QueueRequest, now: datetime) -> QueueEntry:
        row = self._conn.execute(
            SQL["add_queue_entry"],
            (request.queue, run_id, request.seq, request.priority, request.fairness_key, ts(now)),
        ).fetchone()
        return _entry(row)

    def holders(self, queue: str) -> int:
        (count,) = self._conn.execute(SQL["queue_holders"], (queue,)).fetchone()
        return int(count)

    def first_waiting(self, row: QueueRow, count: int) -> list[QueueEntry]:
        settings = row.settings
        fairness = "coalesce(k.served, -1), " if settings.fairness == "key" else ""
        arrival = "e.id DESC" if settings.order == "lifo" else "e.id"
        # The order depends on the queue's settings (fairness by key, LIFO), so it is assembled.
        rows = self._conn.execute(
            f"SELECT e.* FROM queue_entries AS e {SQL['live_entries']}"
            " LEFT JOIN queue_keys AS k ON k.queue = e.queue AND k.fairness_key = e.fairness_key"
            # A paused run waits in no line: the room is for the others.
            " WHERE e.queue = ? AND e.admitted_at IS NULL AND r.status != 'paused'"
            f" ORDER BY e.priority DESC, {fairness}{arrival} LIMIT ?",
            (settings.name, count),
        )
        return [_entry(r) for r in rows]

    def save_admitted(self, entry: QueueEntry, row: QueueRow, now: datetime) -> None:
        conn = self._conn
        conn.execute(SQL["admit_queue_entry"], (ts(now), entry.id))
        conn.execute(
            SQL["save_queue_window"],
            (ts(row.window_start), row.window_count, row.served, row.settings.name),
        )
        if row.settings.fairness == "key":
            conn.execute(
                SQL["save_queue_key"],
                (row.settings.name, entry.fairness_key, row.served),
            )

    def save_denied(self, entry: QueueEntry) -> None:
        self._conn.execute(SQL["deny_queue_entry"], (entry.id,))

    def mark_queued(self, run_id: str) -> None:
        self._conn.execute(SQL["mark_queued"], (run_id,))

    def drop_entries(
        self, run_id: str, seqs: Collection[int] | None, *, lost_turn: bool
    ) -> set[str]:
        rows = self._conn.execute(
            SQL["drop_queue_entries"],
            (
                run_id,
                None if seqs is None else 1,
                dumps(sorted(seqs or ())),
                int(lost_turn),
            ),
        )
        return {row["queue"] for row in rows}

    def wake(self, run_ids: Sequence[str], now: datetime) -> list[str]:
        return [run_id for run_id in run_ids if self._wake(self._conn, run_id, now)]


__all__ = ["SqliteQueues", "register_queues"]
