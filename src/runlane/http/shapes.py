"""The JSON shape of runs and step records, shared by the HTTP API and ``runlane runs --json``.

Kept apart from the app so the command line prints JSON without Starlette installed.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from .. import payloads
from ..history import ReplayReport
from ..lanes import AllLanes, DebounceLane, Lane, QueueLane, RateLane
from ..models import AuditEntry, EngineInfo, LaneMember, Run, StepRecord
from ..schedules import ScheduleState
from ..step_queues import QueueEntry

# A run as lists show it: no input, output or error (those are the detail's).
SUMMARY_FIELDS = ("id", "workflow", "version", "status", "created_at", "updated_at", "tags")

PUBLIC_RUN_FIELDS = (
    "id", "workflow", "version", "status", "input", "output", "error", "tags",
    "created_at", "updated_at", "wake_at", "parent_id", "namespace", "priority", "attributes",
    "forked_from", "deadline_at", "pause_requested_at",
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
    shown = {name: jsonable(getattr(run, name)) for name in PUBLIC_RUN_FIELDS}
    return _payloads_shown(shown)


def step_to_dict(record: StepRecord) -> dict[str, Any]:
    shown = {
        f.name: jsonable(getattr(record, f.name)) for f in fields(record) if f.name != "wake_at"
    }
    return _payloads_shown(shown)


def _payloads_shown(shown: dict[str, Any]) -> dict[str, Any]:
    """A payload this side could not decode (still encoded: no codec here, or another key)
    is shown as the string ``"encrypted"``; an error keeps its type, its message
    ``"encrypted"``."""
    for name in ("input", "output"):
        shown[name] = payloads.shown(shown[name])
    shown["error"] = payloads.shown_error(shown["error"])
    return shown


def run_summary(run: Run) -> dict[str, Any]:
    return {name: jsonable(getattr(run, name)) for name in SUMMARY_FIELDS}


def lane_to_dict(lane: Lane) -> dict[str, Any]:
    return {
        "kind": lane.kind,
        "key": lane.key,
        "name": lane.name,
        "workflow": lane.workflow,
        "namespace": lane.namespace,
        "tag": lane.tag,
        "limit": lane.limit,
        "usage": lane.usage,
        "waiting": lane.waiting,
        "holders": [_member(m) for m in lane.holders],
        "waiters": [_member(m) for m in lane.waiters],
    }


def _member(member: LaneMember) -> dict[str, Any]:
    """A run of a lane, as the lanes list it (the overview lists a lane's first ones)."""
    return {
        "id": member.run_id,
        "workflow": member.workflow,
        "status": str(member.status),
        "created_at": jsonable(member.created_at),
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


def lanes_to_dict(found: AllLanes) -> dict[str, list[dict[str, Any]]]:
    """``GET /lanes``: singleton and quota lanes, step queues, and run-level limits (rate
    limits, then debounces)."""
    return {
        "lanes": [lane_to_dict(lane) for lane in found.lanes],
        "queues": [queue_lane_to_dict(lane) for lane in found.queues],
        "limits": [rate_lane_to_dict(lane) for lane in found.rates]
        + [debounce_lane_to_dict(lane) for lane in found.debounces],
    }


def rate_lane_to_dict(lane: RateLane) -> dict[str, Any]:
    """A run-level rate limit's (or throttle's) key: its sliding window as it stands now, the
    starts it counts, the throttled starts waiting for it, and when a start fits again."""
    return {
        "kind": "rate_limit",
        "name": lane.name,
        "key": lane.key,
        "workflow": lane.workflow,
        "namespace": lane.namespace,
        "limit": lane.limit,
        "period": lane.period,
        "used": lane.used,
        "window_start": jsonable(lane.window_start),
        "resets_at": jsonable(lane.resets_at),
        "clears_at": jsonable(lane.clears_at),
        "counted": [_counted(r) for r in lane.counted],
        "held": [_counted(r) for r in lane.held],
    }


def _counted(run: Run) -> dict[str, Any]:
    return {**run_summary(run), "counted_at": jsonable(run.rate_at)}


def debounce_lane_to_dict(lane: DebounceLane) -> dict[str, Any]:
    """A debounced key: the run its starts fold into, and when it fires."""
    return {
        "kind": "debounce",
        "name": lane.name,
        "key": lane.key,
        "workflow": lane.workflow,
        "namespace": lane.namespace,
        "run": run_summary(lane.run),
        "first_at": jsonable(lane.first_at),
        "fires_at": jsonable(lane.fires_at),
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


def audit_to_dict(entry: AuditEntry) -> dict[str, Any]:
    """An audit log entry as ``GET /audit`` and ``runlane audit --json`` show it."""
    shown: dict[str, Any] = jsonable(
        {
            "id": entry.id,
            "at": entry.at,
            "actor": entry.actor,
            "source": entry.source,
            "action": entry.action,
            "run_id": entry.run_id,
            "detail": entry.detail,
            "outcome": entry.outcome,
            "namespace": entry.namespace,
        }
    )
    return shown


def engine_to_dict(info: EngineInfo) -> dict[str, Any]:
    """An engine's record as ``GET /engines`` and ``runlane engines --json`` show it."""
    shown: dict[str, Any] = jsonable(
        {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "namespace": info.namespace,
            "started_at": info.started_at,
            "last_beat_at": info.last_beat_at,
            "alive": info.alive,
            "serves": [{"workflow": w, "version": v} for w, v in info.serves],
            "groups": list(info.groups),
        }
    )
    return shown


def unserved_to_list(counts: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    """The active runs of each code no live engine serves, as ``GET /engines`` shows them."""
    return [{"workflow": w, "version": v, "runs": n} for (w, v), n in sorted(counts.items())]


def replay_to_dict(report: ReplayReport) -> dict[str, Any]:
    """``runlane replay --json``: the runs checked, each one the code diverges from (where,
    what the history holds there, what the code does), and each one not checked (why)."""
    return {
        "checked": report.checked,
        "diverged": [
            {
                "run_id": run.id,
                "workflow": run.workflow,
                "version": run.version,
                "seq": error.seq,
                "recorded": error.recorded,
                "new": error.new,
                "message": str(error),
            }
            for run, error in report.diverged
        ],
        "skipped": [
            {"run_id": run.id, "workflow": run.workflow, "version": run.version, "why": why}
            for run, why in report.skipped
        ],
    }


def schedule_to_dict(state: ScheduleState) -> dict[str, Any]:
    """A schedule as the API, the dashboard and ``runlane schedules --json`` show it."""
    schedule = state.schedule
    record = schedule.to_record()
    shown: dict[str, Any] = jsonable(
        {
            **record,
            "input": payloads.shown(record["input"]),
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
