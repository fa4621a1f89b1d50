"""The SQLite store's schedules: rows of the ``schedules`` table, and the firing of a window."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from ... import admission
from ...models import RunSpec, Started, StoredSchedule, WindowFire, run_from_spec
from ...serialization import dumps
from ..base import window_results
from .ops import create, index_attributes
from .reads import get_runs
from .rows import (
    RUN_COLUMNS,
    Stamps,
    placeholders,
    run_values,
    schedule_from_row,
    ts,
)
from .statements import SQL

Conn = sqlite3.Connection


def get_schedule(conn: Conn, schedule_id: str) -> StoredSchedule | None:
    row = conn.execute(SQL["get_schedule"], (schedule_id,)).fetchone()
    return None if row is None else schedule_from_row(row)


def list_schedules(conn: Conn) -> list[StoredSchedule]:
    return [schedule_from_row(row) for row in conn.execute(SQL["list_schedules"])]


def due_schedules(
    conn: Conn, now: datetime, limit: int, workflows: Collection[str] | None = None
) -> list[StoredSchedule]:
    names = None if workflows is None else dumps(sorted(workflows))
    rows = conn.execute(SQL["due_schedules"], (ts(now), names, limit))
    return [schedule_from_row(row) for row in rows]


def save_schedule(conn: Conn, schedule: StoredSchedule) -> StoredSchedule:
    conn.execute(
        SQL["save_schedule"],
        (
            schedule.id,
            dumps(schedule.definition),
            int(schedule.paused),
            ts(schedule.next_window_at),
            ts(schedule.next_fire_at),
            ts(schedule.created_at),
            ts(schedule.updated_at),
        ),
    )
    saved = get_schedule(conn, schedule.id)
    assert saved is not None
    return saved


def delete_schedule(conn: Conn, schedule_id: str) -> bool:
    return conn.execute(SQL["delete_schedule"], (schedule_id,)).rowcount > 0


def fire_schedule(
    conn: Conn,
    schedule_id: str,
    expected: datetime,
    next_window: datetime,
    next_fire: datetime,
    specs: Sequence[RunSpec],
    now: datetime,
    window: datetime | None,
) -> list[Started] | None:
    moved = conn.execute(
        SQL["move_schedule"],
        (ts(next_window), ts(next_fire), ts(now), ts(now), schedule_id, ts(expected)),
    )
    if moved.rowcount == 0:
        return None
    started = [create(conn, spec, now) for spec in specs]
    if specs:
        run_id, error = admission.last_fire(started, window)
        conn.execute(
            SQL["record_schedule_fire"],
            (run_id, None if error is None else dumps(error), schedule_id),
        )
    return started


def fire_windows(
    conn: Conn, fires: Sequence[WindowFire], now: datetime
) -> list[list[Started] | None]:
    """Many schedules' fires in the caller's one transaction (a write: no other writer runs
    in between); fires whose runs are all ungated go set-based, a few statements for all."""
    if any(fire.spec is not None and fire.spec.gated for fire in fires):
        return [
            fire_schedule(
                conn,
                fire.schedule_id,
                fire.expected,
                fire.next_window,
                fire.next_fire,
                [] if fire.spec is None else [fire.spec],
                now,
                fire.window,
            )
            for fire in fires
        ]
    return _fire_plain(conn, fires, now)


def _fire_plain(
    conn: Conn, fires: Sequence[WindowFire], now: datetime
) -> list[list[Started] | None]:
    ids = dumps([fire.schedule_id for fire in fires])
    awaiting = dict(conn.execute(SQL["schedule_windows"], (ids,)).fetchall())
    stamp = Stamps()  # a batch's runs, windows and fire times share a few instants
    moved = {f.schedule_id: f for f in fires if awaiting.get(f.schedule_id) == stamp(f.expected)}
    specs = [fire.spec for fire in moved.values() if fire.spec is not None]
    found = get_runs(conn, [spec.id for spec in specs])
    new = [run_from_spec(spec) for spec in specs if spec.id not in found]
    if new:  # every column of a run row, spelled once in rows.py
        columns = placeholders(RUN_COLUMNS.split(","))
        conn.executemany(
            f"INSERT INTO runs ({RUN_COLUMNS}) VALUES {columns}",
            [run_values(r, stamp) for r in new],
        )
        for run in new:
            index_attributes(conn, run.id, run.attributes)
    conn.executemany(
        SQL["move_schedule_plainly"],
        [_moved_values(fire, now, stamp) for fire in moved.values()],
    )
    runs = {run.id: Started(run, created=True) for run in new}
    runs.update((run.id, Started(run, created=False)) for run in found.values())
    started = {f.schedule_id: runs[f.spec.id] for f in moved.values() if f.spec is not None}
    return window_results(fires, moved, started)


def _moved_values(fire: WindowFire, now: datetime, stamp: Stamps) -> tuple[Any, ...]:
    run_id = fire.spec.id if fire.spec is not None else None
    at = stamp(now)
    return (
        stamp(fire.next_window),
        stamp(fire.next_fire),
        at,
        at,
        run_id,
        run_id,
        fire.schedule_id,
    )


__all__ = [
    "delete_schedule",
    "due_schedules",
    "fire_schedule",
    "fire_windows",
    "get_schedule",
    "list_schedules",
    "save_schedule",
]
