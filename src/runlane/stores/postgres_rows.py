"""PostgresStore's statements and the translation between its rows and runlane's records."""

from __future__ import annotations

import re
from datetime import datetime
from importlib import resources
from typing import Any

from ..models import Event, Run, RunSpec, RunStatus, Signal, StepRecord
from ..serialization import dumps

Row = dict[str, Any]

_BLOCK = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)


def load_queries() -> dict[str, str]:
    """The statements of ``sql/queries/postgres.sql``, by their ``-- name:``."""
    text = (resources.files(__package__) / "sql" / "queries" / "postgres.sql").read_text("utf-8")
    parts = _BLOCK.split(text)  # [preamble, name1, body1, name2, body2, ...]
    return {name: _statement(body) for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def _statement(body: str) -> str:
    # Comments go: psycopg would read a placeholder mentioned in one as a parameter.
    lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";")


def json_param(value: Any) -> str | None:
    """A JSON value as statement text; None stays SQL NULL (it reads back as None either way)."""
    return None if value is None else dumps(value)


def spec_params(spec: RunSpec) -> Row:
    return {
        "id": spec.id,
        "workflow": spec.workflow,
        "version": spec.version,
        "input": json_param(spec.input),
        "tags": list(spec.tags),
        "created_at": spec.created_at,
        "parent_id": spec.parent_id,
        "namespace": spec.namespace,
        "priority": spec.priority,
        "singleton_key": spec.singleton.key if spec.singleton else None,
        "singleton_limit": spec.singleton.limit if spec.singleton else None,
        "concurrency_key": spec.quota.key if spec.quota else None,
        "deadline_at": spec.deadline_at,
    }


def step_params(run_id: str, record: StepRecord) -> Row:
    return {
        "run_id": run_id,
        "seq": record.seq,
        "name": record.name,
        "kind": str(record.kind),
        "status": str(record.status),
        "input": json_param(record.input),
        "output": json_param(record.output),
        "error": json_param(record.error),
        "attempts": record.attempts,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "last_heartbeat_at": record.last_heartbeat_at,
        "wake_at": record.wake_at,
    }


def run_from_row(row: Row) -> Run:
    return Run(
        id=row["id"],
        workflow=row["workflow"],
        version=row["version"],
        status=RunStatus(row["status"]),
        input=row["input"],
        output=row["output"],
        error=row["error"],
        tags=tuple(row["tags"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        wake_at=row["wake_at"],
        parent_id=row["parent_id"],
        namespace=row["namespace"],
        priority=row["priority"],
        singleton_key=row["singleton_key"],
        singleton_limit=row["singleton_limit"],
        holds_slot=row["holds_slot"],
        concurrency_key=row["concurrency_key"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        deadline_at=row["deadline_at"],
        recoveries=row["recoveries"],
        wake_requested_at=row["wake_requested_at"],
    )


def step_from_row(row: Row) -> StepRecord:
    return StepRecord(
        run_id=row["run_id"],
        seq=row["seq"],
        name=row["name"],
        kind=row["kind"],
        status=row["status"],
        input=row["input"],
        output=row["output"],
        error=row["error"],
        attempts=row["attempts"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        last_heartbeat_at=row["last_heartbeat_at"],
        wake_at=row["wake_at"],
    )


def signal_from_row(row: Row) -> Signal:
    return Signal(row["id"], row["run_id"], row["name"], row["payload"], row["created_at"])


def event_from_row(row: Row) -> Event:
    return Event(row["seq"], row["name"], row["payload"], row["created_at"], row["id"])


def claimable(row: Row, now: datetime) -> bool:
    """Whether a locked run row may be claimed now (see ``Store.claim_run``)."""
    status = row["status"]
    if status == RunStatus.PENDING:
        return True
    if status in (RunStatus.SUSPENDED, RunStatus.BLOCKED):
        return row["wake_at"] is not None and row["wake_at"] <= now
    if status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        return row["lease_expires_at"] is not None and row["lease_expires_at"] <= now
    return False


__all__ = [
    "Row",
    "claimable",
    "event_from_row",
    "json_param",
    "load_queries",
    "run_from_row",
    "signal_from_row",
    "spec_params",
    "step_from_row",
    "step_params",
]
