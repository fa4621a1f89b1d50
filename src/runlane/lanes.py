"""The lanes as an operator sees them: who holds each key, who waits behind it, how full it is.

Each singleton lane (``singleton_key``, see :func:`runlane.admission.lane`) with its slot
holders and its waiters in FIFO order, and each quota key (``concurrency_key``) with the runs it
counts. The overview is what the store counts per lane (``Store.lane_members``: each lane's
first holders and waiters, and how many there are), so a page of every lane costs the lanes,
not their runs; a lane read by its key (``Store.lane_runs(lane)``) lists every run in it. Step
queues are lanes of steps: :func:`queue_lanes` views ``Store.queue_views``. Run-level rate
limits, throttles and debounces are lanes of starts: :func:`limit_lanes` views
``Store.limited_runs``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal, TypeVar

from .admission import key_scope, lane_parts
from .models import LaneMember, QueueSettings, Run
from .step_queues import QueueEntry, QueueView, current_window

if TYPE_CHECKING:
    from .stores.base import Reads

T = TypeVar("T")


SHOWN = 3
"""How many of a lane's holders, and of its waiters, the lanes overview lists (it counts them
all): a page of 1,000 lanes reads and draws 1,000 lanes, not every run waiting in them."""


@dataclass(frozen=True)
class Lane:
    """One key's lane. ``name`` is the key as stored (a singleton lane names its workflow, see
    ``admission.lane``); ``key`` is the key as the workflow's rule gave it, the one in the run
    tags ``singleton:<key>`` and ``concurrency:<key>``. ``workflow`` is None for a global
    singleton lane and for a quota, which every workflow shares. ``namespace`` is the
    namespace whose own lane it is (its runs were started by an engine with
    ``scope_reads``), None for a lane every namespace shares.

    ``usage`` is how many runs hold a slot (a quota: how many it counts) and ``waiting`` how
    many wait for one; ``holders`` and ``waiters`` list them oldest first, every one when the
    lane was read by its key, the first :data:`SHOWN` of each in the overview."""

    kind: Literal["singleton", "concurrency"]
    name: str
    key: str
    workflow: str | None
    limit: int | None
    holders: tuple[LaneMember, ...]
    waiters: tuple[LaneMember, ...] = ()
    namespace: str | None = None
    usage: int = 0
    waiting: int = 0

    @property
    def tag(self) -> str:
        return f"{self.kind}:{self.key}"

    @property
    def complete(self) -> bool:
        """Whether every holder and waiter is listed."""
        return len(self.holders) == self.usage and len(self.waiters) == self.waiting


LaneRow = tuple[str, str, bool, int | None, T]
"""A lane's run as ``first_of_each_lane`` counts it: its lane's kind and name, whether it holds
(a slot, or the quota's count), the limit it carries, and the run (or its row)."""


def first_of_each_lane(
    rows: Iterable[LaneRow[T]],
    shown: int | None,
    member: Callable[[T, int, int, int | None], LaneMember],
) -> list[LaneMember]:
    """The counting behind ``Store.lane_members``, over each lane's runs read oldest first: the
    first ``shown`` (None: all) that hold and that do not, each made a member by ``member``
    with its place, how many of its side there are and the limit of the lane's newest run.
    PostgreSQL does the same with window functions."""
    kept: list[tuple[LaneRow[T], int]] = []
    counts: dict[tuple[str, str, bool], int] = {}
    limits: dict[tuple[str, str], int | None] = {}
    for row in rows:
        kind, name, holds, limit, _ = row
        counts[kind, name, holds] = place = counts.get((kind, name, holds), 0) + 1
        limits[kind, name] = limit  # the newest run's, read last
        if shown is None or place <= shown:
            kept.append((row, place))
    return [
        member(row[4], place, counts[row[0], row[1], row[2]], limits[row[0], row[1]])
        for row, place in kept
    ]


def members_of(runs: Iterable[Run], shown: int | None = None) -> list[LaneMember]:
    """What ``Store.lane_members`` reads, from the active gated runs themselves (oldest first):
    the in-memory store's read, and a lane read by its key (``shown`` None: every run)."""

    def rows() -> Iterator[LaneRow[tuple[str, str, bool, Run]]]:
        for run in runs:
            if run.singleton_key is not None:
                lane = ("singleton", run.singleton_key, run.holds_slot)
                yield (*lane, run.singleton_limit, (*lane, run))
            if run.concurrency_key is not None:
                quota = run.quota
                counted = quota is None or run.status in quota.count_statuses
                lane = ("concurrency", run.concurrency_key, counted)
                yield (*lane, run.concurrency_limit, (*lane, run))

    def member(
        of: tuple[str, str, bool, Run], place: int, total: int, limit: int | None
    ) -> LaneMember:
        kind, name, holds, run = of
        return LaneMember(kind, name, run.id, run.workflow, run.status, run.created_at,
                          holds, place, total, limit)  # fmt: skip

    return first_of_each_lane(rows(), shown, member)


def lanes(members: Iterable[LaneMember]) -> list[Lane]:
    """The lanes of ``members`` (as ``Store.lane_members`` reads them): singleton lanes, then
    quotas, by key. A quota's uncounted runs only make its lane seen."""
    # A page of 1,000 lanes is 4,000 members, and every object made here lives until the page
    # is drawn: one list a lane while they come (a dict by kind, so no key made a member), the
    # lane and its two tuples after.
    grouped: dict[str, dict[str, list[LaneMember]]] = {"singleton": {}, "concurrency": {}}
    for member in members:
        of_kind = grouped[member.kind]
        lane = of_kind.get(member.name)
        if lane is None:
            of_kind[member.name] = [member]
        else:
            lane.append(member)
    found = [
        _lane(kind, name, lane)
        for kind, of_kind in grouped.items()
        for name, lane in of_kind.items()
    ]
    return sorted(found, key=lambda lane: (lane.kind != "singleton", lane.key, lane.name))


def _lane(kind: str, name: str, members: list[LaneMember]) -> Lane:
    members.sort(key=_side_place)  # its holders first, each side in place order
    split = next((i for i, m in enumerate(members) if not m.holds), len(members))
    holding, other = tuple(members[:split]), tuple(members[split:])
    limit = members[0].limit
    usage = holding[0].of if holding else 0
    namespace, shown, workflow, key = _names(name)
    if kind == "concurrency":
        return Lane("concurrency", name, shown, None, limit, holding, (), namespace, usage)
    waiting = other[0].of if other else 0
    return Lane("singleton", name, key, workflow, limit, holding, other, namespace, usage, waiting)


def _side_place(member: LaneMember) -> tuple[bool, int]:
    return not member.holds, member.place


def lane_key(kind: str, name: str) -> str:
    """The key lane ``name`` (a stored key) of ``kind`` is shown by: a singleton lane's key
    without its workflow, a quota's key; either without its namespace."""
    _, shown, _, key = _names(name)
    return key if kind == "singleton" else shown


def of_lane_key(members: list[LaneMember], key: str | None) -> list[LaneMember]:
    """The ``members`` of the lanes shown by ``key`` (``lane_key``); ``members`` itself for
    None."""
    if key is None:
        return members
    return [m for m in members if lane_key(m.kind, m.name) == key]


@functools.lru_cache(maxsize=4096)
def _names(name: str) -> tuple[str | None, str, str | None, str]:
    """A stored lane key's namespace and the key shown (a quota's), and its workflow and key
    (a singleton lane's): parsed once per key, not once per page."""
    namespace, shown = key_scope(name)
    workflow, key = lane_parts(name)
    return namespace, shown, workflow, key


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


async def all_lanes(store: Reads, now: datetime, key: str | None = None) -> AllLanes:
    """Read every lane from ``store`` at ``now``: the overview of the singleton and quota lanes
    (each counted, its first :data:`SHOWN` holders and waiters listed), the step queues and the
    run-level limits; none of the reads locks anything. With ``key``, only the lanes of that key
    (see :meth:`AllLanes.of_key`), each singleton and quota lane of it read whole: the store
    reads that key's lanes only, not the overview of every lane."""
    overview = lanes(await store.lane_members(SHOWN, key=key))
    views, limited = await store.queue_views(), await store.limited_runs(now)
    found = AllLanes(overview, queue_lanes(views, now), *limit_lanes(limited, now))
    if key is None:
        return found
    found = found.of_key(key)
    whole = [
        lane if lane.complete else await lane_of(store, lane.kind, lane.name)
        for lane in found.lanes
    ]
    return replace(found, lanes=[lane for lane in whole if lane is not None])


async def lanes_of_run(store: Reads, run: Run, now: datetime) -> AllLanes:
    """What a blocked run's page needs of the lanes: its singleton lane, every waiter listed
    (its place in line), and the step queues (a step of it may wait in one)."""
    own = None
    if run.singleton_key is not None:
        own = await lane_of(store, "singleton", run.singleton_key)
    views = await store.queue_views()
    return AllLanes([own] if own else [], queue_lanes(views, now), [], [])


async def lane_of(
    store: Reads, kind: Literal["singleton", "concurrency"], name: str
) -> Lane | None:
    """The lane ``name`` (a stored key) of ``kind`` as it stands now, every holder and waiter
    listed: one search of its key's index. None when no active run is in it."""
    found = lanes(members_of(await store.lane_runs(name)))
    return next((lane for lane in found if (lane.kind, lane.name) == (kind, name)), None)


__all__ = [
    "SHOWN",
    "AllLanes",
    "DebounceLane",
    "Lane",
    "QueueLane",
    "RateLane",
    "all_lanes",
    "first_of_each_lane",
    "lane_key",
    "lane_of",
    "lanes",
    "lanes_of_run",
    "limit_lanes",
    "members_of",
    "of_lane_key",
    "queue_lanes",
]
