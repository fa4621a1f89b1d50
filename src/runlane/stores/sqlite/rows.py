"""Rows of the SQLite schema to and from the store's frozen records.

Timestamps are ISO-8601 UTC text with microseconds: fixed width, so comparing the text in SQL
compares the instants, and they come back as timezone-aware UTC datetimes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ...clock import utc
from ...models import (
    AuditEntry,
    EngineInfo,
    Event,
    LaneMember,
    Run,
    Signal,
    StepRecord,
    StoredSchedule,
)
from ...serialization import dumps, loads
from .. import rows as shared


def ts(value: datetime | None) -> str | None:
    return None if value is None else instant_text(value)


def instant_text(value: datetime) -> str:
    return utc(value).isoformat(timespec="microseconds")


def from_ts(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def from_opt_ts(text: str | None) -> datetime | None:
    return None if text is None else from_ts(text)


def _json(value: Any) -> str | None:
    return None if value is None else dumps(value)


# SQLite keeps JSON documents and timestamps as text.
_DECODE = shared.Decode(json=loads, instant=from_ts, moment=from_opt_ts)


def run_from_row(row: sqlite3.Row) -> Run:
    return shared.run_from_row(row, _DECODE)


RUN_COLUMNS = (
    "id, workflow, version, status, input, output, error, tags, created_at, updated_at, wake_at,"
    " parent_id, namespace, priority, singleton_key, singleton_limit, holds_slot,"
    " concurrency_key, lease_owner, lease_expires_at, deadline_at, recoveries, wake_requested_at,"
    " concurrency_limit, concurrency_statuses, admission_retries, queued, failures, rate_key,"
    " rate_at, begin_at, debounce_key, awaiting_decision_task_id, rate_limit, rate_until,"
    " handoff_at, forked_from, pause_requested_at, detached, attributes, fence"
)


def _statuses(statuses: Any) -> str | None:
    return None if statuses is None else dumps(sorted(statuses))


def _attributes(attributes: Any) -> str | None:
    """A run's attributes, NULL while it has none."""
    return dumps(attributes) if attributes else None


# How a run's attribute is kept in its column of the same name, where it is not kept as it is.
_STORED: dict[str, Callable[[Any], Any]] = {
    "status": str,
    "input": _json,
    "output": _json,
    "error": _json,
    "tags": lambda tags: dumps(list(tags)),
    "holds_slot": int,
    "queued": int,
    "detached": int,
    "forked_from": lambda forked: None if forked is None else dumps(list(forked)),
    "concurrency_statuses": _statuses,
    "attributes": _attributes,
    **dict.fromkeys(
        (
            "created_at",
            "updated_at",
            "wake_at",
            "lease_expires_at",
            "deadline_at",
            "wake_requested_at",
            "rate_at",
            "begin_at",
            "rate_until",
            "handoff_at",
            "pause_requested_at",
        ),
        ts,
    ),
}
_DOCUMENTS = frozenset(
    {"input", "output", "error", "tags", "concurrency_statuses", "forked_from", "attributes"}
)
# Each column of RUN_COLUMNS (the run's attribute of that name) with how it is kept.
_RUN_FIELDS = tuple(
    (name, _STORED.get(name)) for name in (column.strip() for column in RUN_COLUMNS.split(","))
)


def run_values(run: Run, stamps: Stamps | None = None) -> tuple[Any, ...]:
    """Values for :data:`RUN_COLUMNS`, in that order; the instants' text from ``stamps`` when
    given (the runs of a batch share their few instants)."""
    state = run.__dict__
    instant = ts if stamps is None else stamps
    return tuple(
        state[name] if stored is None else (instant if stored is ts else stored)(state[name])
        for name, stored in _RUN_FIELDS
    )


class Stamps(dict[datetime, str]):
    """``ts`` of each instant once: its text takes 1-2 us to make, a lookup 0.1."""

    def __call__(self, value: datetime | None) -> str | None:
        if value is None:
            return None
        text = self.get(value)
        if text is None:
            text = self[value] = instant_text(value)
        return text


def changed_columns(run: Run, before: Run) -> tuple[tuple[str, ...], list[Any]]:
    """The columns ``run`` changes from ``before``, and their values as stored. A document
    (a JSON value, the tags) counts as changed unless it is the same object: equality would
    take ``1`` for ``True``."""
    names: list[str] = []
    values: list[Any] = []
    new, old = run.__dict__, before.__dict__
    for name, stored in _RUN_FIELDS:
        value, was = new[name], old[name]
        if value is was or (name not in _DOCUMENTS and value == was):
            continue
        names.append(name)
        values.append(value if stored is None else stored(value))
    return tuple(names), values


def step_from_row(row: sqlite3.Row) -> StepRecord:
    return shared.step_from_row(row, _DECODE)


STEP_COLUMNS = (
    "run_id, seq, name, kind, status, input, output, error, attempts, started_at, finished_at,"
    " last_heartbeat_at, wake_at, dispatches, fence"
)


def step_values(record: StepRecord) -> tuple[Any, ...]:
    """Values for :data:`STEP_COLUMNS`, in that order."""
    return (
        record.run_id,
        record.seq,
        record.name,
        str(record.kind),
        str(record.status),
        _json(record.input),
        _json(record.output),
        _json(record.error),
        record.attempts,
        ts(record.started_at),
        ts(record.finished_at),
        ts(record.last_heartbeat_at),
        ts(record.wake_at),
        record.dispatches,
        record.fence,
    )


def signal_from_row(row: sqlite3.Row) -> Signal:
    return shared.signal_from_row(row, _DECODE)


def schedule_from_row(row: sqlite3.Row) -> StoredSchedule:
    return shared.schedule_from_row(row, _DECODE)


def event_from_row(row: sqlite3.Row) -> Event:
    return shared.event_from_row(row, _DECODE)


def placeholders(values: Any) -> str:
    """``(?, ?, ...)`` for an ``IN`` list of ``len(values)`` parameters."""
    return "(" + ", ".join("?" for _ in values) + ")"


def engine_from_row(row: sqlite3.Row) -> EngineInfo:
    return EngineInfo(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        namespace=row["namespace"],
        started_at=from_ts(row["started_at"]),
        last_beat_at=from_ts(row["last_beat_at"]),
        lease=row["lease"],
        serves=tuple((str(w), str(v)) for w, v in loads(row["serves"])),
        groups=tuple(loads(row["groups"])),
    )


def audit_from_row(row: sqlite3.Row) -> AuditEntry:
    return shared.audit_from_row(row, _DECODE)


MemberRow = tuple[str, str, str, str, str, str, int, int | None]
"""A row of ``lane_members``: kind, name, id, workflow, status, created_at, holds, limit."""


def lane_member(row: MemberRow, place: int, of: int, limit: int | None) -> LaneMember:
    """A row of ``lane_members`` with its place and count (reads.lane_members works them out)
    as a :class:`LaneMember`."""
    kind, name, run_id, workflow, status, created_at, holds, _ = row
    return LaneMember(
        kind, name, run_id, workflow, shared.STATUS_OF[status], _DECODE.instant(created_at),
        bool(holds), place, of, limit,
    )  # fmt: skip


def audit_values(entry: AuditEntry) -> tuple[Any, ...]:
    """``append_audit``'s parameters."""
    return (
        ts(entry.at),
        entry.actor,
        entry.source,
        entry.action,
        entry.outcome,
        entry.run_id,
        entry.namespace,
        entry.detail,
    )


def engine_values(info: EngineInfo) -> tuple[Any, ...]:
    """``announce_engine``'s parameters."""
    return (
        info.id,
        info.host,
        info.pid,
        info.namespace,
        ts(info.started_at),
        ts(info.last_beat_at),
        info.lease,
        dumps([list(pair) for pair in info.serves]),
        dumps(list(info.groups)),
    )


__all__ = [
    "RUN_COLUMNS",
    "STEP_COLUMNS",
    "MemberRow",
    "audit_from_row",
    "audit_values",
    "engine_from_row",
    "engine_values",
    "event_from_row",
    "from_opt_ts",
    "from_ts",
    "lane_member",
    "placeholders",
    "run_from_row",
    "run_values",
    "schedule_from_row",
    "signal_from_row",
    "step_from_row",
    "step_values",
    "ts",
]
