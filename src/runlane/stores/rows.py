"""Rows of the SQL stores to runlane's records: one mapping for SQLite and PostgreSQL.

The drivers hand back the same columns in their own types: psycopg decodes ``jsonb``, ``text[]``
and ``timestamptz`` itself, while SQLite keeps JSON and ISO-8601 timestamps as text. Each store
says how to read those with a :class:`Decode`; the column-to-field mapping is written once here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..models import (
    AuditEntry,
    Event,
    Run,
    RunStatus,
    Signal,
    StepRecord,
    StoredSchedule,
)

STATUS_OF: dict[str, RunStatus] = {status.value: status for status in RunStatus}
"""A stored status's :class:`RunStatus`: a dict lookup, a tenth of the enum's own call (every
run read, and the lanes overview's 4,000 rows at a time)."""


@dataclass(frozen=True, slots=True)
class Decode:
    """How one driver's column values become Python values."""

    json: Callable[[Any], Any]  # a JSON document (or an array of text), NULL as None
    instant: Callable[[Any], datetime]  # a timestamp that is never NULL
    moment: Callable[[Any], datetime | None]  # a timestamp, NULL as None


def run_from_row(row: Any, decode: Decode) -> Run:
    """A run row (every column of ``runlane_runs``, by name) as a :class:`Run`."""
    moment = decode.moment
    return Run(
        id=row["id"],
        workflow=row["workflow"],
        version=row["version"],
        status=STATUS_OF[row["status"]],
        input=decode.json(row["input"]),
        output=decode.json(row["output"]),
        error=decode.json(row["error"]),
        tags=tuple(decode.json(row["tags"])),
        created_at=decode.instant(row["created_at"]),
        updated_at=decode.instant(row["updated_at"]),
        wake_at=moment(row["wake_at"]),
        parent_id=row["parent_id"],
        namespace=row["namespace"],
        priority=row["priority"],
        attributes=decode.json(row["attributes"]) or {},
        singleton_key=row["singleton_key"],
        singleton_limit=row["singleton_limit"],
        holds_slot=bool(row["holds_slot"]),
        concurrency_key=row["concurrency_key"],
        lease_owner=row["lease_owner"],
        lease_expires_at=moment(row["lease_expires_at"]),
        deadline_at=moment(row["deadline_at"]),
        recoveries=row["recoveries"],
        wake_requested_at=moment(row["wake_requested_at"]),
        concurrency_limit=row["concurrency_limit"],
        concurrency_statuses=_statuses(decode.json(row["concurrency_statuses"])),
        admission_retries=row["admission_retries"],
        queued=bool(row["queued"]),
        failures=row["failures"],
        rate_key=row["rate_key"],
        rate_at=moment(row["rate_at"]),
        rate_limit=row["rate_limit"],
        rate_until=moment(row["rate_until"]),
        handoff_at=moment(row["handoff_at"]),
        begin_at=moment(row["begin_at"]),
        debounce_key=row["debounce_key"],
        awaiting_decision_task_id=row["awaiting_decision_task_id"],
        forked_from=_forked_from(decode.json(row["forked_from"])),
        pause_requested_at=moment(row["pause_requested_at"]),
        detached=bool(row["detached"]),
        fence=row["fence"],
    )


def _forked_from(value: Any) -> tuple[str, int] | None:
    return None if value is None else (str(value[0]), int(value[1]))


def _statuses(names: list[str] | None) -> frozenset[RunStatus] | None:
    return None if names is None else frozenset(RunStatus(name) for name in names)


def step_from_row(row: Any, decode: Decode) -> StepRecord:
    """A row of ``runlane_steps`` as a :class:`StepRecord`."""
    return StepRecord(
        run_id=row["run_id"],
        seq=row["seq"],
        name=row["name"],
        kind=row["kind"],
        status=row["status"],
        input=decode.json(row["input"]),
        output=decode.json(row["output"]),
        error=decode.json(row["error"]),
        attempts=row["attempts"],
        started_at=decode.moment(row["started_at"]),
        finished_at=decode.moment(row["finished_at"]),
        last_heartbeat_at=decode.moment(row["last_heartbeat_at"]),
        wake_at=decode.moment(row["wake_at"]),
        dispatches=row["dispatches"],
        fence=row["fence"],
    )


def signal_from_row(row: Any, decode: Decode) -> Signal:
    """A row of ``runlane_signals`` as a :class:`Signal`."""
    payload = decode.json(row["payload"])
    return Signal(row["id"], row["run_id"], row["name"], payload, decode.instant(row["created_at"]))


def schedule_from_row(row: Any, decode: Decode) -> StoredSchedule:
    """A row of ``runlane_schedules`` / ``schedules`` as a :class:`StoredSchedule`."""
    return StoredSchedule(
        id=row["id"],
        definition=decode.json(row["definition"]),
        paused=bool(row["paused"]),
        next_window_at=decode.moment(row["next_window_at"]),
        next_fire_at=decode.moment(row["next_fire_at"]),
        created_at=decode.instant(row["created_at"]),
        updated_at=decode.instant(row["updated_at"]),
        last_fire_at=decode.moment(row["last_fire_at"]),
        last_run_id=row["last_run_id"],
        last_error=decode.json(row["last_error"]),
    )


def event_from_row(row: Any, decode: Decode) -> Event:
    """A row of ``runlane_events`` as an :class:`Event`."""
    payload = decode.json(row["payload"])
    return Event(row["seq"], row["name"], payload, decode.instant(row["created_at"]), row["id"])


def audit_from_row(row: Any, decode: Decode) -> AuditEntry:
    """An audit log row (every column of its table, by name) as an :class:`AuditEntry`."""
    return AuditEntry(
        at=decode.instant(row["at"]),
        actor=row["actor"],
        source=row["source"],
        action=row["action"],
        outcome=row["outcome"],
        run_id=row["run_id"],
        namespace=row["namespace"],
        detail=row["detail"],
        id=row["id"],
    )


__all__ = [
    "STATUS_OF",
    "Decode",
    "audit_from_row",
    "event_from_row",
    "run_from_row",
    "schedule_from_row",
    "signal_from_row",
    "step_from_row",
]
