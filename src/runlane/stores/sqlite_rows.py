"""Rows of the SQLite schema to and from the store's frozen records.

Timestamps are ISO-8601 UTC text with microseconds: fixed width, so comparing the text in SQL
compares the instants, and they come back as timezone-aware UTC datetimes.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

from ..clock import utc
from ..models import Event, Run, RunStatus, Signal, StepRecord
from ..serialization import dumps, loads


def ts(value: datetime | None) -> str | None:
    return None if value is None else utc(value).isoformat(timespec="microseconds")


def from_ts(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def from_opt_ts(text: str | None) -> datetime | None:
    return None if text is None else from_ts(text)


def _json(value: Any) -> str | None:
    return None if value is None else dumps(value)


def run_from_row(row: sqlite3.Row) -> Run:
    return Run(
        id=row["id"],
        workflow=row["workflow"],
        version=row["version"],
        status=RunStatus(row["status"]),
        input=loads(row["input"]),
        output=loads(row["output"]),
        error=loads(row["error"]),
        tags=tuple(loads(row["tags"])),
        created_at=from_ts(row["created_at"]),
        updated_at=from_ts(row["updated_at"]),
        wake_at=from_opt_ts(row["wake_at"]),
        parent_id=row["parent_id"],
        namespace=row["namespace"],
        priority=row["priority"],
        singleton_key=row["singleton_key"],
        singleton_limit=row["singleton_limit"],
        holds_slot=bool(row["holds_slot"]),
        concurrency_key=row["concurrency_key"],
        lease_owner=row["lease_owner"],
        lease_expires_at=from_opt_ts(row["lease_expires_at"]),
        deadline_at=from_opt_ts(row["deadline_at"]),
        recoveries=row["recoveries"],
        wake_requested_at=from_opt_ts(row["wake_requested_at"]),
        concurrency_limit=row["concurrency_limit"],
        concurrency_statuses=_statuses(loads(row["concurrency_statuses"])),
        admission_retries=row["admission_retries"],
        queued=bool(row["queued"]),
        failures=row["failures"],
        rate_key=row["rate_key"],
        rate_at=from_opt_ts(row["rate_at"]),
        rate_limit=row["rate_limit"],
        rate_until=from_opt_ts(row["rate_until"]),
        handoff_at=from_opt_ts(row["handoff_at"]),
        begin_at=from_opt_ts(row["begin_at"]),
        debounce_key=row["debounce_key"],
        awaiting_decision_task_id=row["awaiting_decision_task_id"],
    )


def _statuses(names: list[str] | None) -> frozenset[RunStatus] | None:
    return None if names is None else frozenset(RunStatus(name) for name in names)


RUN_COLUMNS = (
    "id, workflow, version, status, input, output, error, tags, created_at, updated_at, wake_at,"
    " parent_id, namespace, priority, singleton_key, singleton_limit, holds_slot,"
    " concurrency_key, lease_owner, lease_expires_at, deadline_at, recoveries, wake_requested_at,"
    " concurrency_limit, concurrency_statuses, admission_retries, queued, failures, rate_key,"
    " rate_at, begin_at, debounce_key, awaiting_decision_task_id, rate_limit, rate_until,"
    " handoff_at"
)


def run_values(run: Run) -> tuple[Any, ...]:
    """Values for :data:`RUN_COLUMNS`, in that order."""
    return (
        run.id,
        run.workflow,
        run.version,
        str(run.status),
        _json(run.input),
        _json(run.output),
        _json(run.error),
        dumps(list(run.tags)),
        ts(run.created_at),
        ts(run.updated_at),
        ts(run.wake_at),
        run.parent_id,
        run.namespace,
        run.priority,
        run.singleton_key,
        run.singleton_limit,
        int(run.holds_slot),
        run.concurrency_key,
        run.lease_owner,
        ts(run.lease_expires_at),
        ts(run.deadline_at),
        run.recoveries,
        ts(run.wake_requested_at),
        run.concurrency_limit,
        None if run.concurrency_statuses is None else dumps(sorted(run.concurrency_statuses)),
        run.admission_retries,
        int(run.queued),
        run.failures,
        run.rate_key,
        ts(run.rate_at),
        ts(run.begin_at),
        run.debounce_key,
        run.awaiting_decision_task_id,
        run.rate_limit,
        ts(run.rate_until),
        ts(run.handoff_at),
    )


def step_from_row(row: sqlite3.Row) -> StepRecord:
    return StepRecord(
        run_id=row["run_id"],
        seq=row["seq"],
        name=row["name"],
        kind=row["kind"],
        status=row["status"],
        input=loads(row["input"]),
        output=loads(row["output"]),
        error=loads(row["error"]),
        attempts=row["attempts"],
        started_at=from_opt_ts(row["started_at"]),
        finished_at=from_opt_ts(row["finished_at"]),
        last_heartbeat_at=from_opt_ts(row["last_heartbeat_at"]),
        wake_at=from_opt_ts(row["wake_at"]),
        dispatches=row["dispatches"],
    )


STEP_COLUMNS = (
    "run_id, seq, name, kind, status, input, output, error, attempts, started_at, finished_at,"
    " last_heartbeat_at, wake_at, dispatches"
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
    )


def signal_from_row(row: sqlite3.Row) -> Signal:
    return Signal(
        row["id"], row["run_id"], row["name"], loads(row["payload"]), from_ts(row["created_at"])
    )


def event_from_row(row: sqlite3.Row) -> Event:
    return Event(
        row["seq"], row["name"], loads(row["payload"]), from_ts(row["created_at"]), row["id"]
    )


def placeholders(values: Any) -> str:
    """``(?, ?, ...)`` for an ``IN`` list of ``len(values)`` parameters."""
    return "(" + ", ".join("?" for _ in values) + ")"


__all__ = [
    "RUN_COLUMNS",
    "STEP_COLUMNS",
    "event_from_row",
    "from_opt_ts",
    "from_ts",
    "placeholders",
    "run_from_row",
    "run_values",
    "signal_from_row",
    "step_from_row",
    "step_values",
    "ts",
]
