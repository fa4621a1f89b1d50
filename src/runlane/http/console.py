"""The console's own reads, beside the API's: the overview of the last hour, the lanes over
time, and the engines and workers this server knows of.

``engine_view`` and ``heard_workers`` are the one place that reads the engine's execution side
directly (its local turns, the worker descriptors its transport heard): the engine has no public
door for them yet.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from typing import Any

from .. import activity
from ..engine import Engine
from .shapes import jsonable

OVERVIEW_SPAN = timedelta(hours=1)


async def overview(engine: Engine, now: datetime) -> dict[str, Any]:
    """``GET /overview``: runs started and settled each minute of the last hour, failures,
    latency percentiles (from the store: ``Store.run_activity``), and the active runs now."""
    since = now - OVERVIEW_SPAN
    until = now + timedelta(minutes=1)  # a run created a moment "after" now by another clock
    counts = await engine.read(lambda store: store.run_activity(since, until))
    active = await engine.read(lambda store: store.active_run_counts())
    series = activity.minutes(counts, since, now)
    latency = activity.latency_of(series)
    by_status: dict[str, int] = {}
    for (_, status), runs in active.items():
        by_status[str(status)] = by_status.get(str(status), 0) + runs
    return {
        "since": jsonable(since),
        "until": jsonable(now),
        "totals": dict(activity.totals(series)),
        "active": by_status,
        "latency": {
            "bounds": list(activity.LATENCY_BOUNDS),
            "buckets": latency,
            "p50": _finite(activity.percentile(latency, 0.5)),
            "p95": _finite(activity.percentile(latency, 0.95)),
        },
        "minutes": [_minute(m) for m in series],
    }


def _finite(value: float | None) -> float | str | None:
    """JSON has no infinity: a percentile past the last bound is said as such."""
    return f"> {activity.LATENCY_BOUNDS[-1]:g}" if value == float("inf") else value


def _minute(minute: activity.Minute) -> dict[str, Any]:
    return {
        "at": jsonable(minute.at),
        "started": minute.started,
        "completed": minute.completed,
        "failed": minute.failed,
        "cancelled": minute.cancelled,
        "p95": _finite(activity.percentile(minute.latency, 0.95)),
    }


def engine_view(engine: Engine, started_at: datetime) -> dict[str, Any]:
    """This server's own engine: what it serves and what it has in flight now."""
    execution = engine._execution
    local = getattr(execution, "_local", None)
    remote = execution.remote
    definitions = engine.registry.workflows
    return {
        "id": engine.id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started_at": jsonable(started_at),
        "drives": engine.drive,
        "namespace": engine.namespace,
        "scope_reads": engine.scope_reads,
        "serves": sorted(f"{d.name}@{d.version}" for d in definitions),
        "groups": sorted({d.group for d in definitions if d.group is not None}),
        "turns_in_flight": len(local.inflight) if local is not None else 0,
        "turn_limit": engine.options.max_local_runs,
        "remote_steps_awaited": len(remote._waiters) if remote is not None else 0,
        "transport": type(engine.transport).__name__ if engine.transport is not None else None,
    }


def heard_workers(engine: Engine) -> list[dict[str, Any]]:
    """The workers this engine heard announce themselves on its transport (their descriptors,
    docs/wire.md), newest announcement first; none without a transport or consumers."""
    remote = engine._execution.remote
    if remote is None:
        return []
    found = [dict(descriptor) for descriptor in remote.workers.values()]
    return sorted(found, key=lambda d: str(d.get("at", "")), reverse=True)


__all__ = ["OVERVIEW_SPAN", "engine_view", "heard_workers", "overview"]
