"""The JSON shape of runs and step records, shared by the HTTP API and ``runlane runs --json``.

Kept apart from the app so the command line prints JSON without Starlette installed.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from ..lanes import Lane, QueueLane
from ..models import Run, StepRecord
from ..queues import QueueEntry
from ..schedules import ScheduleState

# A run as lists show it: no input, output or error (those are the detail's).
SUMMARY_FIELDS = ("id", "workflow", "version", "status", "created_at", "updated_at", "tags")

PUBLIC_RUN_FIELDS = (
    "id", "workflow", "version", "status", "input", "output", "error", "tags",
    "created_at", "updated_at", "wake_at", "parent_id", "namespace", "priority",
)  # fmt: skip


def jsonable(value: Any) -> Any:
    """Datetimes become ISO-8601 UTC strings; tuples become lists; the rest is already JSON."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, tuple | list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def run_to_dict(run: Run) -> dict[str, Any]:
    return {name: jsonable(getattr(run, name)) for name in PUBLIC_RUN_FIELDS}


def step_to_dict(record: StepRecord) -> dict[str, Any]:
    return {
        f.name: jsonable(getattr(record, f.name)) for f in fields(record) if f.name != "wake_at"
    }


def run_summary(run: Run) -> dict[str, Any]:
    return {name: jsonable(getattr(run, name)) for name in SUMMARY_FIELDS}


def lane_to_dict(lane: Lane) -> dict[str, Any]:
    return {
        "kind": lane.kind,
        "key": lane.key,
        "name": lane.name,
        "workflow": lane.workflow,
        "tag": lane.tag,
        "limit": lane.limit,
        "usage": lane.usage,
        "holders": [run_summary(r) for r in lane.holders],
        "waiters": [run_summary(r) for r in lane.waiters],
    }


def queue_lane_to_dict(lane: QueueLane) -> dict[str, Any]:
    """A step queue's lane: ``usage`` of ``concurrency`` slots, its rate window, its holders
    and its waiters, first to be admitted first."""
    settings = lane.settings
    rate = None
    if settings.rate_limit is not None:
        rate = {
            "limit": settings.rate_limit,
            "period": settings.rate_period,
            "window_start": jsonable(lane.window_start),
            "used": lane.window_used,
        }
    return {
        "kind": "queue",
        "name": lane.name,
        "concurrency": settings.concurrency,
        "usage": lane.usage,
        "rate": rate,
        "fairness": settings.fairness,
        "order": settings.order,
        "holders": [_entry(e) for e in lane.holders],
        "waiters": [_entry(e) for e in lane.waiters],
    }


def _entry(entry: QueueEntry) -> dict[str, Any]:
    return {
        "run_id": entry.run_id,
        "seq": entry.seq,
        "priority": entry.priority,
        "fairness_key": entry.fairness_key,
        "admitted_at": jsonable(entry.admitted_at),
        "denials": entry.denials,
    }


def schedule_to_dict(state: ScheduleState) -> dict[str, Any]:
    """A schedule as the API, the dashboard and ``runlane schedules --json`` show it."""
    schedule = state.schedule
    shown: dict[str, Any] = jsonable(
        {
            **schedule.to_record(),
            "paused": schedule.paused,
            "next_fire_at": state.next_fire_at,
            "last_fire_at": state.last_fire_at,
            "last_run_id": state.last_run_id,
            "last_error": state.last_error,
            "created_at": state.created_at,
            "updated_at": state.updated_at,
        }
    )
    return shown
