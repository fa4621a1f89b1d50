"""The SQLite store's retention: deleting settled runs, in batches, with everything they own."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import datetime

from ..models import RunStatus
from ..serialization import dumps
from .sqlite_reads import ACTIVE
from .sqlite_rows import ts

Conn = sqlite3.Connection

# Each owning table, keyed by run id; none cascades in SQLite's schema.
OWNED = ("steps", "signals", "queue_entries")


def prune_runs(conn: Conn, cutoffs: Mapping[RunStatus, datetime], limit: int) -> list[str]:
    due = [(str(status), ts(before)) for status, before in cutoffs.items() if status.is_terminal]
    if not due or limit < 1:
        return []
    # One (status, updated_at) range per status: each an index walk of runs_terminal.
    ranges = " OR ".join("(r.status = ? AND r.updated_at < ?)" for _ in due)
    rows = conn.execute(
        f"SELECT r.id FROM runs AS r WHERE ({ranges})"
        f" AND NOT EXISTS (SELECT 1 FROM runs AS c WHERE c.parent_id = r.id AND c.status IN {ACTIVE})"
        " ORDER BY r.updated_at, r.id LIMIT ?",
        [value for pair in due for value in pair] + [limit],
    ).fetchall()
    doomed = [row["id"] for row in rows]
    if doomed:
        ids = dumps(doomed)
        for table in (*OWNED, "runs"):
            column = "id" if table == "runs" else "run_id"
            conn.execute(
                f"DELETE FROM {table} WHERE {column} IN (SELECT value FROM json_each(?))", (ids,)
            )
    return doomed
