"""The SQLite store's step queue tables, as a ``queues.QueueBook`` inside one unit of work.

The rules are :func:`runlane.queues.admit` and :func:`runlane.queues.release`; this module only
reads and writes the rows they ask for. Every unit of work already holds the file's write lock
(``BEGIN IMMEDIATE``), so the queue row needs no lock of its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from ...models import QueueSettings
from ...queues import (
    QueueEntry,
    QueueRequest,
    QueueRow,
    QueueView,
    entry_from,
    row_from,
    views_of,
)
from ...serialization import dumps
from .rows import from_opt_ts, ts
from .statements import ACTIVE

Conn = sqlite3.Connection

_LIVE = f"JOIN runs AS r ON r.id = e.run_id AND r.status IN {ACTIVE}"


def register_queues(conn: Conn, settings: Sequence[QueueSettings], now: datetime) -> None:
    for given in settings:
        conn.execute(
            "INSERT INTO step_queues (name, concurrency, rate_limit, rate_period, fairness,"
            " arrival, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,"
            " rate_limit = excluded.rate_limit, rate_period = excluded.rate_period,"
            " fairness = excluded.fairness, arrival = excluded.arrival,"
            " updated_at = excluded.updated_at",
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
    rows = [_row(r) for r in conn.execute("SELECT * FROM step_queues")]
    entries = [
        _entry(r) for r in conn.execute(f"SELECT e.* FROM queue_entries AS e {_LIVE} ORDER BY e.id")
    ]
    keys = conn.execute("SELECT queue, fairness_key, served FROM queue_keys")
    return views_of(rows, entries, {(q, k): n for q, k, n in keys})


class SqliteQueues:
    """The queue tables on one connection, inside the caller's transaction."""

    def __init__(self, conn: Conn, wake: Callable[[Conn, str, datetime], bool]) -> None:
        self._conn = conn
        self._wake = wake

    def queue(self, name: str) -> QueueRow | None:
        row = self._conn.execute("SELECT * FROM step_queues WHERE name = ?", (name,)).fetchone()
        return None if row is None else _row(row)

    def entry(self, run_id: str, seq: int) -> QueueEntry | None:
        row = self._conn.execute(
            "SELECT * FROM queue_entries WHERE run_id = ? AND seq = ?", (run_id, seq)
        ).fetchone()
        return None if row is None else _entry(row)

    def add_entry(self, run_id: str, request: QueueRequest, now: datetime) -> QueueEntry:
        row = self._conn.execute(
            "INSERT INTO queue_entries (queue, run_id, seq, priority, fairness_key, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
            (request.queue, run_id, request.seq, request.priority, request.fairness_key, ts(now)),
        ).fetchone()
        return _entry(row)

    def holders(self, queue: str) -> int:
        (count,) = self._conn.execute(
            f"SELECT COUNT(*) FROM queue_entries AS e {_LIVE}"
            " WHERE e.queue = ? AND e.admitted_at IS NOT NULL",
            (queue,),
        ).fetchone()
        return int(count)

    def first_waiting(self, row: QueueRow, count: int) -> list[QueueEntry]:
        settings = row.settings
        fairness = "coalesce(k.served, -1), " if settings.fairness == "key" else ""
        arrival = "e.id DESC" if settings.order == "lifo" else "e.id"
        rows = self._conn.execute(
            f"SELECT e.* FROM queue_entries AS e {_LIVE}"
            " LEFT JOIN queue_keys AS k ON k.queue = e.queue AND k.fairness_key = e.fairness_key"
            " WHERE e.queue = ? AND e.admitted_at IS NULL"
            f" ORDER BY e.priority DESC, {fairness}{arrival} LIMIT ?",
            (settings.name, count),
        )
        return [_entry(r) for r in rows]

    def save_admitted(self, entry: QueueEntry, row: QueueRow, now: datetime) -> None:
        conn = self._conn
        conn.execute("UPDATE queue_entries SET admitted_at = ? WHERE id = ?", (ts(now), entry.id))
        conn.execute(
            "UPDATE step_queues SET window_start = ?, window_count = ?, served = ? WHERE name = ?",
            (ts(row.window_start), row.window_count, row.served, row.settings.name),
        )
        if row.settings.fairness == "key":
            conn.execute(
                "INSERT INTO queue_keys (queue, fairness_key, served) VALUES (?, ?, ?)"
                " ON CONFLICT (queue, fairness_key) DO UPDATE SET served = excluded.served",
                (row.settings.name, entry.fairness_key, row.served),
            )

    def save_denied(self, entry: QueueEntry) -> None:
        self._conn.execute(
            "UPDATE queue_entries SET denials = denials + 1 WHERE id = ?", (entry.id,)
        )

    def mark_queued(self, run_id: str) -> None:
        self._conn.execute("UPDATE runs SET queued = 1 WHERE id = ? AND NOT queued", (run_id,))

    def drop_entries(
        self, run_id: str, seqs: Collection[int] | None, *, admitted_only: bool
    ) -> set[str]:
        rows = self._conn.execute(
            "DELETE FROM queue_entries WHERE run_id = ?"
            " AND (? IS NULL OR seq IN (SELECT value FROM json_each(?)))"
            " AND (NOT ? OR admitted_at IS NOT NULL) RETURNING queue",
            (
                run_id,
                None if seqs is None else 1,
                dumps(sorted(seqs or ())),
                int(admitted_only),
            ),
        )
        return {row["queue"] for row in rows}

    def wake(self, run_ids: Sequence[str], now: datetime) -> list[str]:
        return [run_id for run_id in run_ids if self._wake(self._conn, run_id, now)]


__all__ = ["SqliteQueues", "register_queues"]
