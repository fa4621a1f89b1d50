"""The command line's tables (rich): runs, a run, its steps, the lanes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rich.markup import escape
from rich.table import Table

from .attributes import AttributeValue, filter_text
from .lanes import DebounceLane, Lane, QueueLane, RateLane
from .models import AuditEntry, EngineInfo, Run, StepRecord
from .schedules import ScheduleState


def runs_table(found: list[Run]) -> Table:
    table = Table(
        "id", "workflow", "status", "created (UTC)", "updated (UTC)", "tags", "attributes"
    )
    for run in found:
        table.add_row(
            escape(run.id),
            escape(f"{run.workflow}@{run.version}"),
            status_text(run.status),
            _time(run.created_at, short=True),
            _time(run.updated_at, short=True),
            escape(", ".join(run.tags)),
            escape(attributes_text(run.attributes)),
        )
    return table


def attributes_text(attributes: Mapping[str, AttributeValue]) -> str:
    """A run's attributes as ``--attr`` takes them: ``name=value`` pairs, apart by spaces."""
    return " ".join(f"{name}={filter_text(value)}" for name, value in attributes.items())


def run_details(run: Run) -> Table:
    table = Table(show_header=False, box=None)
    rows: list[tuple[str, Any]] = [
        ("id", run.id),
        ("workflow", f"{run.workflow}@{run.version}"),
        ("status", status_text(run.status)),
        ("created", _time(run.created_at)),
        ("updated", _time(run.updated_at)),
        ("wake at", _time(run.wake_at)),
        ("parent", run.parent_id or ""),
        ("tags", ", ".join(run.tags)),
        ("attributes", attributes_text(run.attributes)),
        ("input", json.dumps(run.input)),
        ("output", json.dumps(run.output)),
        ("error", error_line(run.error) if run.error else ""),
    ]
    for name, value in rows:
        table.add_row(f"[bold]{name}[/]", value if name == "status" else escape(str(value)))
    return table


def error_line(error: dict[str, Any]) -> str:
    """A stored error in one line: ``Type: message``."""
    return f"{error.get('type', 'Error')}: {error.get('message', '')}"


def attempt_lines(steps: list[StepRecord]) -> list[str]:
    """Each failed attempt of the steps that failed or were retried, oldest first: when it
    began, how long it took, and its error."""
    lines = []
    for record in steps:
        for attempt in (record.error or {}).get("attempts") or []:
            began = datetime.fromisoformat(attempt["started_at"])
            took = datetime.fromisoformat(attempt["finished_at"]) - began
            lines.append(
                f"attempt {attempt['attempt']} of step #{record.seq} {record.name}:"
                f" {error_line(attempt)} (at {_when(began)}, took {took.total_seconds():.3f} s)"
            )
    return lines


def tracebacks(run: Run, steps: list[StepRecord]) -> list[tuple[str, str]]:
    """The tracebacks to print after a run's tables, each under a heading, as the lines they
    are (the stored text, not its JSON escape): the run's, then each step's error."""
    found: list[tuple[str, str]] = []
    if run.error and run.error.get("traceback"):
        found.append((f"the run: {error_line(run.error)}", str(run.error["traceback"])))
    for record in steps:
        if record.error and record.error.get("traceback"):
            heading = f"step #{record.seq} {record.name}, attempt {record.attempts}"
            found.append((f"{heading}: {error_line(record.error)}", str(record.error["traceback"])))
    return found


def audit_table(entries: list[AuditEntry]) -> Table:
    table = Table("id", "when (UTC)", "who", "via", "action", "run", "detail", "outcome")
    for entry in entries:
        table.add_row(
            str(entry.id),
            _time(entry.at),
            escape(entry.actor),
            entry.source,
            escape(entry.action),
            escape(entry.run_id or ""),
            escape(entry.detail or ""),
            escape(entry.outcome),
        )
    return table


def steps_table(steps: list[StepRecord]) -> Table:
    table = Table("seq", "kind", "name", "status", "attempts", "finished", "output")
    for record in steps:
        table.add_row(
            str(record.seq),
            record.kind,
            escape(record.name),
            status_text(record.status),
            str(record.attempts),
            _time(record.finished_at, short=True),
            _short(record.output if record.error is None else record.error.get("message")),
        )
    return table


STATUS_STYLES = {
    "pending": "yellow",
    "running": "cyan",
    "suspended": "blue",
    "blocked": "magenta",
    "cancelling": "magenta",
    "completed": "green",
    "failed": "red",
    "dead": "red",
    "cancelled": "dim",
}


def status_text(status: str) -> str:
    return f"[{STATUS_STYLES.get(str(status), 'white')}]{status}[/]"


def _time(value: Any, *, short: bool = False) -> str:
    """ISO-8601 in UTC; ``short`` drops the year and zone to keep tables narrow."""
    if value is None:
        return ""
    value = value.astimezone(UTC)
    if short:
        return str(value.strftime("%m-%d %H:%M:%S"))
    return str(value.isoformat(timespec="seconds"))


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return escape(text if len(text) <= width else text[: width - 1] + "…")


def _keyed(key: str, namespace: str | None) -> str:
    """A lane's key, and the namespace whose own lane it is (none for a shared lane)."""
    return escape(key if namespace is None else f"{key} (namespace {namespace})")


def _listed(ids: list[str], of: int) -> str:
    """Run ids, and how many more there are than the overview lists."""
    more = of - len(ids)
    return ", ".join(ids) + (f" and {more} more" if more > 0 else "")


def lanes_table(found: list[Lane]) -> Table:
    table = Table("lane", "key", "workflow", "usage", "holders", "waiters, first in line first")
    for lane in found:
        limit = "?" if lane.limit is None else str(lane.limit)
        table.add_row(
            lane.kind,
            _keyed(lane.key, lane.namespace),
            escape(lane.workflow or ("every workflow" if lane.kind == "concurrency" else "global")),
            f"{lane.usage}/{limit}",
            escape(_listed([m.run_id for m in lane.holders], lane.usage)),
            escape(_listed([m.run_id for m in lane.waiters], lane.waiting)),
        )
    return table


def queues_table(found: list[QueueLane]) -> Table:
    table = Table("step queue", "slots", "rate window", "holding (run/step)", "waiters, next first")
    for lane in found:
        settings = lane.settings
        limit = "∞" if settings.concurrency is None else str(settings.concurrency)
        rate = "-"
        if settings.rate_limit is not None:
            rate = f"{lane.window_used}/{settings.rate_limit} per {settings.rate_period:g} s"
        table.add_row(
            escape(lane.name),
            f"{lane.usage}/{limit}",
            rate,
            escape(", ".join(f"{e.run_id}/{e.seq}" for e in lane.holders)),
            escape(", ".join(f"{e.run_id}/{e.seq}" for e in lane.waiters)),
        )
    return table


def limits_table(rates: list[RateLane], debounces: list[DebounceLane]) -> Table:
    """Run-level limits: a rate limit's window and when a start fits again; a debounce's run
    and when it fires."""
    table = Table("limit", "key", "workflow", "window", "next", "runs")
    for rate in rates:
        resets = "now" if rate.resets_at is None else f"fits at {_when(rate.resets_at)}"
        held = f"; held: {', '.join(r.id for r in rate.held)}" if rate.held else ""
        table.add_row(
            "rate limit",
            _keyed(rate.key or "(every start)", rate.namespace),
            escape(rate.workflow or "-"),
            f"{rate.used}/{rate.limit} per {rate.period:g} s",
            resets,
            escape(", ".join(r.id for r in rate.counted) + held),
        )
    for debounce in debounces:
        table.add_row(
            "debounce",
            _keyed(debounce.key or "(every start)", debounce.namespace),
            escape(debounce.workflow or "-"),
            f"since {_when(debounce.first_at)}",
            f"fires at {_when(debounce.fires_at)}",
            escape(debounce.run.id),
        )
    return table


def schedules_table(found: list[ScheduleState]) -> Table:
    table = Table("id", "workflow", "when", "next fire (UTC)", "last run", "last error")
    for state in found:
        when = state.cron if state.cron is not None else f"every {state.every:g} s"
        if state.cron is not None and state.timezone != "UTC":
            when += f" ({state.timezone})"
        error = state.last_error or {}
        table.add_row(
            escape(state.id),
            escape(state.workflow),
            escape(when),
            "paused" if state.paused else _when(state.next_fire_at),
            escape(state.last_run_id or "-"),
            escape(str(error.get("type", "")) if error else "-"),
        )
    return table


def engines_table(found: list[EngineInfo]) -> Table:
    table = Table("engine", "host:pid", "state", "last beat (UTC)", "serves", "groups")
    for engine in found:
        serves = ", ".join(f"{w}@{v}" for w, v in engine.serves) or "nothing (a producer)"
        table.add_row(
            escape(engine.id),
            escape(f"{engine.host}:{engine.pid}"),
            "[green]alive[/green]" if engine.alive else "[red]gone[/red]",
            _when(engine.last_beat_at),
            escape(serves),
            escape(", ".join(engine.groups) or "-"),
        )
    return table


def unserved_table(counts: dict[tuple[str, str], int]) -> Table:
    table = Table("workflow", "version", "active runs no live engine serves")
    for (workflow, version), n in sorted(counts.items()):
        table.add_row(escape(workflow), escape(version), str(n))
    return table


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


__all__ = [
    "attempt_lines",
    "audit_table",
    "engines_table",
    "error_line",
    "lanes_table",
    "limits_table",
    "run_details",
    "runs_table",
    "schedules_table",
    "status_text",
    "steps_table",
    "tracebacks",
    "unserved_table",
]
