"""The lanes as an operator sees them: who holds each key, who waits behind it, how full it is.

A pure view over the active gated runs a store lists (``Store.lane_runs``, oldest first): each
singleton lane (``singleton_key``, see :func:`runlane.admission.lane`) with its slot holders and
its waiters in FIFO order, and each quota key (``concurrency_key``) with the runs it counts.
Step queues are lanes of steps: :func:`queue_lanes` views ``Store.queue_views``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from .admission import lane_parts
from .models import QueueSettings, Run
from .queues import QueueEntry, QueueView, current_window


@dataclass(frozen=True)
class Lane:
    """One key's lane. ``name`` is the key as stored (a singleton lane names its workflow, see
    ``admission.lane``); ``key`` is the key as the workflow's rule gave it, the one in the run
    tags ``singleton:<key>`` and ``concurrency:<key>``. ``workflow`` is None for a global
    singleton lane and for a quota, which every workflow shares."""

    kind: Literal["singleton", "concurrency"]
    name: str
    key: str
    workflow: str | None
    limit: int | None
    holders: tuple[Run, ...]
    waiters: tuple[Run, ...] = ()

    @property
    def usage(self) -> int:
        return len(self.holders)

    @property
    def tag(self) -> str:
        return f"{self.kind}:{self.key}"


def lanes(runs: Iterable[Run]) -> list[Lane]:
    """The lanes of ``runs`` (active, oldest first): singleton lanes, then quotas, by key."""
    singletons: dict[str, list[Run]] = {}
    quotas: dict[str, list[Run]] = {}
    for run in runs:
        if run.singleton_key is not None:
            singletons.setdefault(run.singleton_key, []).append(run)
        if run.concurrency_key is not None:
            quotas.setdefault(run.concurrency_key, []).append(run)
    found = [_singleton(name, members) for name, members in singletons.items()]
    found += [_quota(name, members) for name, members in quotas.items()]
    return sorted(found, key=lambda lane: (lane.kind != "singleton", lane.key, lane.name))


def _singleton(name: str, runs: list[Run]) -> Lane:
    workflow, key = lane_parts(name)
    return Lane(
        "singleton",
        name,
        key,
        workflow,
        # The newest start carries the limit the workflow declares now.
        runs[-1].singleton_limit,
        holders=tuple(r for r in runs if r.holds_slot),
        waiters=tuple(r for r in runs if not r.holds_slot),
    )


def _quota(name: str, runs: list[Run]) -> Lane:
    counted = tuple(r for r in runs if r.quota is None or r.status in r.quota.count_statuses)
    return Lane("concurrency", name, name, None, runs[-1].concurrency_limit, holders=counted)


@dataclass(frozen=True)
class QueueLane:
    """A step queue's lane: the steps holding a slot, the steps waiting in the order the
    queue admits them, and its current fixed rate window (``window_start`` None without a
    rate limit) with the admissions counted in it."""

    settings: QueueSettings
    holders: tuple[QueueEntry, ...]
    waiters: tuple[QueueEntry, ...]
    window_start: datetime | None
    window_used: int

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def usage(self) -> int:
        return len(self.holders)


def queue_lanes(views: Iterable[QueueView], now: datetime) -> list[QueueLane]:
    """The lanes of step queues, by name, their rate windows as they stand at ``now``."""
    found = []
    for view in views:
        start, used = current_window(view.row, now)
        holders, waiters = tuple(view.holders()), tuple(view.waiters())
        found.append(QueueLane(view.row.settings, holders, waiters, start, used))
    return sorted(found, key=lambda lane: lane.name)


__all__ = ["Lane", "QueueLane", "lanes", "queue_lanes"]
