"""The lanes as an operator sees them: who holds each key, who waits behind it, how full it is.

A pure view over the active gated runs a store lists (``Store.lane_runs``, oldest first): each
singleton lane (``singleton_key``, see :func:`runlane.admission.lane`) with its slot holders and
its waiters in FIFO order, and each quota key (``concurrency_key``) with the runs it counts.
Step queues are lanes of steps: :func:`queue_lanes` views ``Store.queue_views``. Run-level rate
limits, throttles and debounces are lanes of starts: :func:`limit_lanes` views
``Store.limited_runs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from .admission import key_scope, lane_parts
from .models import QueueSettings, Run
from .step_queues import QueueEntry, QueueView, current_window

if TYPE_CHECKING:
    from .stores.base import Reads


@dataclass(frozen=True)
class Lane:
    """One key's lane. ``name`` is the key as stored (a singleton lane names its workflow, see
    ``admission.lane``); ``key`` is the key as the workflow's rule gave it, the one in the run
    tags ``singleton:<key>`` and ``concurrency:<key>``. ``workflow`` is None for a global
    singleton lane and for a quota, which every workflow shares. ``namespace`` is the
    namespace whose own lane it is (its runs were started by an engine with
    ``scope_reads``), None for a lane every namespace shares."""

    kind: Literal["singleton", "concurrency"]
    name: str
    key: str
    workflow: str | None
    limit: int | None
    holders: tuple[Run, ...]
    waiters: tuple[Run, ...] = ()
    namespace: str | None = None

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
        namespace=key_scope(name)[0],
    )


def _quota(name: str, runs: list[Run]) -> Lane:
    counted = tuple(r for r in runs if r.quota is None or r.status in r.quota.count_statuses)
    namespace, key = key_scope(name)
    limit = runs[-1].concurrency_limit
    return Lane("concurrency", name, key, None, limit, holders=counted, namespace=namespace)


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


@dataclass(frozen=True)
class RateLane:
    """A run-level rate limit's key at ``now``: the starts its sliding window of ``period``
    seconds counts (``used`` of ``limit``) and the throttled starts counted ahead of time
    (``held``: they begin when the window lets them, in order). ``resets_at`` is the first
    instant a new start fits the window again (None: it fits now); ``clears_at`` the instant
    the last start counted leaves it. ``key`` is None for a limit on the whole workflow;
    ``namespace`` as a :class:`Lane`'s."""

    name: str
    key: str | None
    workflow: str | None
    limit: int
    period: float
    now: datetime
    counted: tuple[Run, ...]
    held: tuple[Run, ...]
    namespace: str | None = None

    @property
    def used(self) -> int:
        return len(self.counted)

    @property
    def window_start(self) -> datetime:
        return self.now - timedelta(seconds=self.period)

    @property
    def resets_at(self) -> datetime | None:
        # The window of a start made now reaches back to the limit-th most recent start.
        starts = sorted((r.rate_at for r in (*self.counted, *self.held) if r.rate_at), reverse=True)
        if len(starts) < self.limit:
            return None
        opens = starts[self.limit - 1] + timedelta(seconds=self.period)
        return opens if opens > self.now else None

    @property
    def clears_at(self) -> datetime | None:
        return max(
            (r.rate_until for r in (*self.counted, *self.held) if r.rate_until), default=None
        )


@dataclass(frozen=True)
class DebounceLane:
    """A debounced key's run that has not begun: starts of the key fold into it (the last
    input wins) until it fires at ``fires_at``; ``first_at`` is when the first of them came;
    ``namespace`` as a :class:`Lane`'s."""

    name: str
    key: str | None
    workflow: str | None
    run: Run
    namespace: str | None = None

    @property
    def fires_at(self) -> datetime | None:
        return self.run.begin_at

    @property
    def first_at(self) -> datetime:
        return self.run.created_at


def limit_lanes(runs: Iterable[Run], now: datetime) -> tuple[list[RateLane], list[DebounceLane]]:
    """The rate-limit and debounce lanes of ``runs`` (``Store.limited_runs`` at ``now``,
    oldest first), each by key."""
    rated: dict[str, list[Run]] = {}
    debounced: list[DebounceLane] = []
    for run in runs:
        if run.rate_key is not None and run.rate_until is not None and run.rate_until > now:
            rated.setdefault(run.rate_key, []).append(run)
        if run.debounce_key is not None and run.held(now):
            key = run.debounce_key
            debounced.append(DebounceLane(key, *_user_key(key), run, key_scope(key)[0]))
    rates = [_rate(name, members, now) for name, members in rated.items()]
    return sorted(rates, key=lambda r: r.name), sorted(debounced, key=lambda d: d.name)


def _rate(name: str, runs: list[Run], now: datetime) -> RateLane:
    newest = runs[-1]  # its start carries the limit the workflow declares now
    assert newest.rate_at is not None and newest.rate_until is not None
    period = (newest.rate_until - newest.rate_at).total_seconds()
    in_order = sorted(runs, key=_counted_at)
    counted = tuple(r for r in in_order if r.rate_at is not None and r.rate_at <= now)
    held = tuple(r for r in in_order if r.rate_at is not None and r.rate_at > now)
    limit = newest.rate_limit or 0
    namespace = key_scope(name)[0]
    return RateLane(name, *_user_key(name), limit, period, now, counted, held, namespace)


def _counted_at(run: Run) -> tuple[datetime, str]:
    assert run.rate_at is not None
    return run.rate_at, run.id


def _user_key(name: str) -> tuple[str | None, str | None]:
    """A rate or debounce lane's key as the rule gave it (None: the whole workflow), and its
    workflow, in the order the lanes take them."""
    workflow, key = lane_parts(name)
    return key or None, workflow


@dataclass(frozen=True)
class AllLanes:
    """Every lane an operator sees, as it stands at one instant."""

    lanes: list[Lane]
    queues: list[QueueLane]
    rates: list[RateLane]
    debounces: list[DebounceLane]

    def of_key(self, key: str | None) -> AllLanes:
        """The lanes of ``key`` (a step queue's name; a rate limit's or a debounce's key, or
        its workflow for one without a key); all of them for None."""
        if key is None:
            return self

        def limit_of(lane: RateLane | DebounceLane) -> bool:
            return lane.key == key or (lane.key is None and lane.workflow == key)

        return AllLanes(
            [lane for lane in self.lanes if lane.key == key],
            [lane for lane in self.queues if lane.name == key],
            [lane for lane in self.rates if limit_of(lane)],
            [lane for lane in self.debounces if limit_of(lane)],
        )


async def all_lanes(store: Reads, now: datetime) -> AllLanes:
    """Read every lane from ``store`` at ``now``: three reads, none of which locks anything."""
    gated, views, limited = (
        await store.lane_runs(),
        await store.queue_views(),
        await store.limited_runs(now),
    )
    return AllLanes(lanes(gated), queue_lanes(views, now), *limit_lanes(limited, now))


__all__ = [
    "AllLanes",
    "DebounceLane",
    "Lane",
    "QueueLane",
    "RateLane",
    "all_lanes",
    "lanes",
    "limit_lanes",
    "queue_lanes",
]
