"""The SQLite store's reads: single queries, run on the store's connection outside a transaction.

Each is one statement, so it sees one consistent snapshot of the file (WAL readers never block).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime

from ..models import ACTIVE_STATUSES, Event, Run, RunQuery, RunStatus, Signal, StepRecord
from ..serialization import dumps
from .sqlite_rows import event_from_row, run_from_row, signal_from_row, step_from_row, ts

Conn = sqlite3.Connection


def _sql_set(statuses: Iterable[RunStatus]) -> str:
    return "(" + ", ".join(f"'{s}'" for s in sorted(statuses)) + ")"


ACTIVE = _sql_set(ACTIVE_STATUSES)
LEASED = _sql_set((RunStatus.RUNNING, RunStatus.CANCELLING))
WAITING = _sql_set((RunStatus.SUSPENDED, RunStatus.BLOCKED))
# The statuses of a key's runs that wait their turn for a slot (a cancelling one never does).
WAITERS = _sql_set(ACTIVE_STATUSES - {RunStatus.CANCELLING})

# ---------------------------------------------------------------- runs


def get_run(conn: Conn, run_id: str) -> Run | None:
    row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if row is None else run_from_row(row)


def get_runs(conn: Conn, run_ids: Sequence[str]) -> dict[str, Run]:
    # One JSON parameter instead of one per id: no limit on how many ids are asked for.
    rows = conn.execute(
        "SELECT * FROM runs WHERE id IN (SELECT value FROM json_each(?))", (dumps(list(run_ids)),)
    )
    return {row["id"]: run_from_row(row) for row in rows}


def get_step(conn: Conn, run_id: str, seq: int) -> StepRecord | None:
    row = conn.execute("SELECT * FROM steps WHERE run_id = ? AND seq = ?", (run_id, seq)).fetchone()
    return None if row is None else step_from_row(row)


def list_steps(conn: Conn, run_id: str) -> list[StepRecord]:
    rows = conn.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY seq", (run_id,))
    return [step_from_row(row) for row in rows]


def signals(conn: Conn, run_id: str) -> list[Signal]:
    rows = conn.execute("SELECT * FROM signals WHERE run_id = ? ORDER BY id", (run_id,))
    return [signal_from_row(row) for row in rows]


# ---------------------------------------------------------------- claim queues


def _scope(namespace: str | None) -> tuple[str, tuple[str, ...]]:
    return ("", ()) if namespace is None else (" AND namespace = ?", (namespace,))


def _ids(
    conn: Conn,
    where: str,
    order: str,
    params: tuple[object, ...],
    limit: int,
    namespace: str | None,
) -> list[str]:
    scope, scope_params = _scope(namespace)
    rows = conn.execute(
        f"SELECT id FROM runs WHERE {where}{scope} ORDER BY {order} LIMIT ?",
        (*params, *scope_params, limit),
    )
    return [row["id"] for row in rows]


def pending_run_ids(conn: Conn, limit: int, namespace: str | None) -> list[str]:
    where = "status = 'pending'"
    return _ids(conn, where, "priority DESC, created_at, id", (), limit, namespace)


def due_run_ids(conn: Conn, now: datetime, limit: int, namespace: str | None) -> list[str]:
    where = f"status IN {WAITING} AND wake_at <= ?"
    return _ids(conn, where, "wake_at, id", (ts(now),), limit, namespace)


def expired_run_ids(conn: Conn, now: datetime, limit: int, namespace: str | None) -> list[str]:
    where = f"status IN {LEASED} AND lease_expires_at <= ?"
    return _ids(conn, where, "lease_expires_at, id", (ts(now),), limit, namespace)


def timed_out_run_ids(conn: Conn, now: datetime, limit: int, namespace: str | None) -> list[str]:
    where = f"status IN {ACTIVE} AND deadline_at <= ?"
    return _ids(conn, where, "deadline_at, id", (ts(now),), limit, namespace)


def list_runs(
    conn: Conn,
    *,
    workflow: str | None,
    status: RunStatus | None,
    tag: str | None,
    parent_id: str | None,
    limit: int,
    offset: int,
) -> list[Run]:
    filters = {
        "workflow = ?": workflow,
        "status = ?": None if status is None else str(status),
        "EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE value = ?)": tag,
        "parent_id = ?": parent_id,
    }
    given = {clause: value for clause, value in filters.items() if value is not None}
    where = " AND ".join(["1", *given])
    rows = conn.execute(
        f"SELECT * FROM runs WHERE {where} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
        (*given.values(), limit, offset),
    )
    return [run_from_row(row) for row in rows]


def _query_where(query: RunQuery, *, cursor: bool) -> tuple[str, list[object]]:
    """``query``'s filters as a WHERE clause and its parameters (the cursor with ``cursor``)."""
    filters: dict[str, object] = {
        "workflow = ?": query.workflow,
        "status = ?": None if query.status is None else str(query.status),
        "EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE value = ?)": query.tag,
        "created_at >= ?": ts(query.created_from),
        "created_at < ?": ts(query.created_until),
    }
    given = {clause: value for clause, value in filters.items() if value is not None}
    params = list(given.values())
    clauses = ["1", *given]
    if cursor and query.after is not None:
        # A row value: SQLite walks the (created_at, id) index from the cursor.
        clauses.append("(created_at, id) < (?, ?)")
        params += [ts(query.after.created_at), query.after.id]
    return " AND ".join(clauses), params


def page_runs(conn: Conn, query: RunQuery, limit: int) -> list[Run]:
    where, params = _query_where(query, cursor=True)
    rows = conn.execute(
        f"SELECT * FROM runs WHERE {where} ORDER BY created_at DESC, id DESC LIMIT ?",
        (*params, limit),
    )
    return [run_from_row(row) for row in rows]


def count_runs(conn: Conn, query: RunQuery) -> dict[RunStatus, int]:
    where, params = _query_where(query, cursor=False)
    rows = conn.execute(f"SELECT status, count(*) FROM runs WHERE {where} GROUP BY status", params)
    return {RunStatus(status): count for status, count in rows}


def active_run_counts(conn: Conn) -> dict[tuple[str, RunStatus], int]:
    rows = conn.execute(
        f"SELECT workflow, status, count(*) FROM runs WHERE status IN {ACTIVE}"
        " GROUP BY workflow, status"
    )
    return {(workflow, RunStatus(status)): count for workflow, status, count in rows}


def lane_runs(conn: Conn) -> list[Run]:
    rows = conn.execute(
        f"SELECT * FROM runs WHERE status IN {ACTIVE}"
        " AND (singleton_key IS NOT NULL OR concurrency_key IS NOT NULL)"
        " ORDER BY created_at, id"
    )
    return [run_from_row(row) for row in rows]


def limited_runs(conn: Conn, now: datetime) -> list[Run]:
    # Two index ranges (runs_rate_window, runs_debounce), not a scan of the rate-limited runs.
    rows = conn.execute(
        "SELECT * FROM runs WHERE rate_until IS NOT NULL AND rate_until > ?"
        " UNION ALL SELECT * FROM runs WHERE debounce_key IS NOT NULL AND status = 'blocked'"
        " AND begin_at > ? AND (rate_until IS NULL OR rate_until <= ?) ORDER BY created_at, id",
        (ts(now), ts(now), ts(now)),
    )
    return [run_from_row(row) for row in rows]


# ---------------------------------------------------------------- events


def events_after(conn: Conn, name: str, after_seq: int, limit: int) -> list[Event]:
    rows = conn.execute(
        "SELECT * FROM events WHERE name = ? AND seq > ? ORDER BY seq LIMIT ?",
        (name, after_seq, limit),
    )
    return [event_from_row(row) for row in rows]


def latest_event_seq(conn: Conn) -> int:
    (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()
    return int(seq)


__all__ = [
    "ACTIVE",
    "LEASED",
    "WAITERS",
    "WAITING",
    "Conn",
    "count_runs",
    "due_run_ids",
    "events_after",
    "expired_run_ids",
    "get_run",
    "get_runs",
    "get_step",
    "lane_runs",
    "latest_event_seq",
    "limited_runs",
    "list_runs",
    "list_steps",
    "page_runs",
    "pending_run_ids",
    "signals",
    "timed_out_run_ids",
]
