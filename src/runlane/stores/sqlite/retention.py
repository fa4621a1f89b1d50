"""The SQLite store's retention: deleting settled runs, in batches, with everything they own,
and old events of the event log."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import datetime

from ...models import RunStatus
from ...serialization import dumps
from .rows import ts
from .statements import ACTIVE, SQL

Conn = sqlite3.Connection

# Each owning table, keyed by run id; none cascades in SQLite's schema.
OWNED = ("steps", "signals", "queue_entries", "attribute_runs")


# The partial index's condition, verbatim: SQLite uses a partial index only for a query that
# repeats its WHERE term (a bound status would not prove it).
SETTLED = "status IN ('cancelled', 'completed', 'dead', 'failed')"


def prune_runs(conn: Conn, cutoffs: Mapping[RunStatus, datetime], limit: int) -> list[str]:
    if limit < 1:
        return []
    # The status is a literal, not a parameter (see SETTLED), so this statement is assembled.
    # One ordered walk of runs_terminal per status, at most ``limit`` rows each; the oldest
    # ``limit`` of them all go. A single query over several statuses would sort every due run.
    due: list[tuple[str, str]] = []
    for status, before in cutoffs.items():
        if status.is_terminal:
            due += conn.execute(
                f"SELECT r.updated_at, r.id FROM runs AS r WHERE r.{SETTLED}"
                f" AND r.status = '{status}' AND r.updated_at < ?"
                f" AND NOT EXISTS (SELECT 1 FROM runs AS c WHERE c.parent_id = r.id"
                f" AND c.status IN {ACTIVE}) ORDER BY r.updated_at LIMIT ?",
                (ts(before), limit),
            ).fetchall()
    doomed = [run_id for _, run_id in sorted(tuple(row) for row in due)[:limit]]
    if doomed:
        ids = dumps(doomed)
        for table in (*OWNED, "runs"):
            column = "id" if table == "runs" else "run_id"
            conn.execute(
                f"DELETE FROM {table} WHERE {column} IN (SELECT value FROM json_each(?))", (ids,)
            )
    return doomed


def prune_events(conn: Conn, before: datetime, limit: int) -> int:
    if limit < 1:
        return 0
    cursor = conn.execute(SQL["prune_events"], (ts(before), limit))
    return cursor.rowcount
