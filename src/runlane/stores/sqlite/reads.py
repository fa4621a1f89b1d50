"""The SQLite store's reads: single queries, run on the store's connection outside a transaction.

Each is one statement, so it sees one consistent snapshot of the file (WAL readers never block);
the lanes overview is two, one for the singleton lanes and one for the quota keys, so each lane
is still counted from one snapshot.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from ...activity import ActivityCount
from ...attributes import AttributeValue
from ...lanes import first_of_each_lane, of_lane_key
from ...models import (
    AuditEntry,
    EngineInfo,
    Event,
    LaneMember,
    Run,
    RunQuery,
    RunStatus,
    Serves,
    Signal,
    StepRecord,
)
from ...serialization import dumps
from .rows import (
    audit_from_row,
    engine_from_row,
    event_from_row,
    lane_member,
    run_from_row,
    signal_from_row,
    step_from_row,
    ts,
)
from .statements import SQL

Conn = sqlite3.Connection

# ---------------------------------------------------------------- runs


def get_run(conn: Conn, run_id: str) -> Run | None:
    row = conn.execute(SQL["get_run"], (run_id,)).fetchone()
    return None if row is None else run_from_row(row)


def get_runs(conn: Conn, run_ids: Sequence[str]) -> dict[str, Run]:
    rows = conn.execute(SQL["get_runs"], (dumps(list(run_ids)),))
    return {row["id"]: run_from_row(row) for row in rows}


def get_step(conn: Conn, run_id: str, seq: int) -> StepRecord | None:
    row = conn.execute(SQL["get_step"], (run_id, seq)).fetchone()
    return None if row is None else step_from_row(row)


def list_steps(conn: Conn, run_id: str) -> list[StepRecord]:
    rows = conn.execute(SQL["list_steps"], (run_id,))
    return [step_from_row(row) for row in rows]


def get_reply(conn: Conn, run_id: str, update_id: str) -> StepRecord | None:
    row = conn.execute(SQL["get_reply"], (run_id, update_id)).fetchone()
    return None if row is None else step_from_row(row)


def signals(conn: Conn, run_id: str) -> list[Signal]:
    rows = conn.execute(SQL["signals"], (run_id,))
    return [signal_from_row(row) for row in rows]


# ---------------------------------------------------------------- claim queues


def _ids(
    conn: Conn,
    name: str,
    params: tuple[object, ...],
    limit: int,
    namespace: str | None,
    serves: Serves | None,
) -> list[str]:
    """The ids of claim queue ``name``: of every code (``name``, or ``name_in`` for one
    namespace), or of the codes ``serves`` names (``name_served``)."""
    if serves is not None:
        codes = dumps([list(pair) for pair in sorted(serves.pairs)])
        rows = conn.execute(SQL[f"{name}_served"], (codes, *params, namespace, limit))
    elif namespace is None:
        rows = conn.execute(SQL[name], (*params, limit))
    else:
        rows = conn.execute(SQL[f"{name}_in"], (*params, namespace, limit))
    return [row["id"] for row in rows]


def pending_run_ids(
    conn: Conn, limit: int, namespace: str | None, serves: Serves | None = None
) -> list[str]:
    return _ids(conn, "pending_ids", (), limit, namespace, serves)


def due_run_ids(
    conn: Conn, now: datetime, limit: int, namespace: str | None, serves: Serves | None = None
) -> list[str]:
    return _ids(conn, "due_ids", (ts(now),), limit, namespace, serves)


def expired_run_ids(
    conn: Conn, now: datetime, limit: int, namespace: str | None, serves: Serves | None = None
) -> list[str]:
    return _ids(conn, "expired_ids", (ts(now),), limit, namespace, serves)


def timed_out_run_ids(
    conn: Conn, now: datetime, limit: int, namespace: str | None, serves: Serves | None = None
) -> list[str]:
    return _ids(conn, "timed_out_ids", (ts(now),), limit, namespace, serves)


# The run listings filter on what the caller gave, so their statements are assembled here.


def list_runs(
    conn: Conn,
    *,
    workflow: str | None,
    status: RunStatus | None,
    tag: str | None,
    parent_id: str | None,
    namespace: str | None,
    limit: int,
    offset: int,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> list[Run]:
    filters = {
        "workflow = ?": workflow,
        "status = ?": None if status is None else str(status),
        _HAS_TAG: tag,
        "parent_id = ?": parent_id,
        "namespace = ?": namespace,
    }
    given = {clause: value for clause, value in filters.items() if value is not None}
    source, params, newest = _selection(given, attributes)
    statement = f"SELECT runs.* {source} {newest} LIMIT ? OFFSET ?"
    return [run_from_row(row) for row in conn.execute(statement, (*params, limit, offset))]


def page_runs(conn: Conn, query: RunQuery, limit: int) -> list[Run]:
    source, params, newest = _query_selection(query, cursor=True)
    statement = f"SELECT runs.* {source} {newest} LIMIT ?"
    return [run_from_row(row) for row in conn.execute(statement, (*params, limit))]


def count_runs(conn: Conn, query: RunQuery) -> dict[RunStatus, int]:
    source, params, _ = _query_selection(query, cursor=False)
    rows = conn.execute(f"SELECT status, count(*) {source} GROUP BY status", params)
    return {RunStatus(status): count for status, count in rows}


_HAS_TAG = "EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE value = ?)"


def _query_selection(query: RunQuery, *, cursor: bool) -> tuple[str, list[object], str]:
    """``query``'s filters as :func:`_selection` gives them (the cursor with ``cursor``)."""
    filters: dict[str, object] = {
        "workflow = ?": query.workflow,
        "status = ?": None if query.status is None else str(query.status),
        _HAS_TAG: query.tag,
        "namespace = ?": query.namespace,
    }
    given = {clause: value for clause, value in filters.items() if value is not None}
    bounds: dict[str, list[object]] = {}
    if query.created_from is not None:
        bounds["{at} >= ?"] = [ts(query.created_from)]
    if query.created_until is not None:
        bounds["{at} < ?"] = [ts(query.created_until)]
    if cursor and query.after is not None:
        # A row value: SQLite walks the (created_at, id) index from the cursor.
        bounds["({at}, {id}) < (?, ?)"] = [ts(query.after.created_at), query.after.id]
    return _selection(given, query.attributes, bounds)


def _selection(
    given: Mapping[str, object],
    attributes: Mapping[str, AttributeValue] | None,
    bounds: Mapping[str, list[object]] | None = None,
) -> tuple[str, list[object], str]:
    """A listing's ``FROM ... WHERE ...``, its parameters, and its ``ORDER BY`` (newest first).

    ``given`` maps conditions on a run to their parameter, ``bounds`` conditions on its
    creation time and id (written with ``{at}`` and ``{id}``) to theirs. A filter on attributes
    reads the runs from the rows of its first attribute (``runs_by_attribute``), whose own
    created_at and run_id the bounds and the order then name: a page is a walk of their index
    from the cursor. Each of the other attributes is tested on the run (``has_attribute``).
    """
    wanted = [(key, dumps(value)) for key, value in (attributes or {}).items()]
    first, others = wanted[:1], wanted[1:]
    at, run_id = ("a.created_at", "a.run_id") if first else ("created_at", "id")
    clauses = ["1", *given, *[SQL["has_attribute"]] * len(others)]
    params = [*_flat(first), *given.values(), *_flat(others)]
    for clause, values in (bounds or {}).items():
        clauses.append(clause.format(at=at, id=run_id))
        params += values
    source = SQL["runs_by_attribute"] if first else "runs"
    where = " AND ".join(clauses)
    return f"FROM {source} WHERE {where}", params, f"ORDER BY {at} DESC, {run_id} DESC"


def _flat(pairs: Sequence[tuple[str, str]]) -> list[object]:
    return [param for pair in pairs for param in pair]


def run_activity(
    conn: Conn, since: datetime, until: datetime, namespace: str | None
) -> list[ActivityCount]:
    span = (ts(since), ts(until), namespace)
    created = conn.execute(SQL["created_activity"], span)
    settled = conn.execute(SQL["settled_activity"], span)
    return [ActivityCount(_minute(m), None, None, runs) for m, runs in created] + [
        ActivityCount(_minute(m), RunStatus(status), bucket, runs)
        for m, status, bucket, runs in settled
    ]


def _minute(number: int) -> datetime:
    """A minute counted from the epoch, as the instant it starts."""
    return datetime.fromtimestamp(number * 60, UTC)


def active_run_counts(conn: Conn, namespace: str | None) -> dict[tuple[str, RunStatus], int]:
    rows = conn.execute(SQL["active_run_counts"], (namespace,))
    return {(workflow, RunStatus(status)): count for workflow, status, count in rows}


def active_code_counts(conn: Conn, namespace: str | None) -> dict[tuple[str, str], int]:
    rows = conn.execute(SQL["active_code_counts"], (namespace,))
    return {(workflow, version): count for workflow, version, count in rows}


def list_engines(conn: Conn) -> list[EngineInfo]:
    return [engine_from_row(row) for row in conn.execute(SQL["list_engines"])]


def list_audit(
    conn: Conn, limit: int, before: int | None, namespace: str | None
) -> list[AuditEntry]:
    rows = conn.execute(SQL["list_audit"], (before, namespace, limit))
    return [audit_from_row(row) for row in rows]


def lane_runs(conn: Conn, lane: str | None) -> list[Run]:
    rows = (
        conn.execute(SQL["lane_runs"])
        if lane is None
        else conn.execute(SQL["lane_runs_of_key"], (lane, lane))
    )
    return [run_from_row(row) for row in rows]


def lane_members(
    conn: Conn, shown: int, namespace: str | None, key: str | None = None
) -> list[LaneMember]:
    """The first ``shown`` holders and non-holders of each lane (the statement reads them by
    lane, oldest first), with how many of each there are and the lane's newest limit: what
    PostgreSQL's ``lane_members`` counts with window functions. With ``key``, the statement
    keeps the lanes whose stored key ends in it, and the exact match is made here. The
    singleton lanes and the quota keys are two statements, each in its index's order (one
    UNION ALL of both was sorted whole); each lane is one statement's, counted from one
    snapshot."""
    rows = itertools.chain.from_iterable(
        _plain_rows(conn, name, (namespace, key))
        for name in ("lane_members", "lane_members_of_quotas")
    )
    lanes = ((row[0], row[1], bool(row[6]), row[7], row) for row in rows)
    return of_lane_key(first_of_each_lane(lanes, shown, lane_member), key)


def _plain_rows(conn: Conn, name: str, params: tuple[object, ...]) -> sqlite3.Cursor:
    """Statement ``name``'s rows as plain tuples (every active gated run is read for the
    lanes page: no row object each)."""
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor.execute(SQL[name], params)


def limited_runs(conn: Conn, now: datetime) -> list[Run]:
    rows = conn.execute(SQL["limited_runs"], (ts(now), ts(now), ts(now)))
    return [run_from_row(row) for row in rows]


# ---------------------------------------------------------------- events


def events_after(conn: Conn, name: str, after_seq: int, limit: int) -> list[Event]:
    rows = conn.execute(SQL["events_after"], (name, after_seq, limit))
    return [event_from_row(row) for row in rows]


def latest_event_seq(conn: Conn) -> int:
    (seq,) = conn.execute(SQL["latest_event_seq"]).fetchone()
    return int(seq)


__all__ = [
    "Conn",
    "active_code_counts",
    "count_runs",
    "due_run_ids",
    "events_after",
    "expired_run_ids",
    "get_reply",
    "get_run",
    "get_runs",
    "get_step",
    "lane_members",
    "lane_runs",
    "latest_event_seq",
    "limited_runs",
    "list_audit",
    "list_engines",
    "list_runs",
    "list_steps",
    "page_runs",
    "pending_run_ids",
    "run_activity",
    "signals",
    "timed_out_run_ids",
]
