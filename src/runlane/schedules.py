"""Schedules: runs started by the clock, each window exactly once across every engine.

A ``Schedule`` is a frozen, validated definition (cron in a time zone, or ``every`` seconds).
Schedules live in the store; ``Scheduler`` is the engine's side: ``engine.schedules`` (upsert,
get, list, pause, resume, delete, trigger) and the loop phase that fires due windows.

A window is one scheduled fire time. Its run id is deterministic (``sched:<id>:<window>``) and
the schedule's next window advances by compare-and-set in the same store operation that creates
the run, so two engines firing at once create it once. Cron times follow the schedule's time
zone through cronsim (Debian cron's rules: a local time skipped by a DST jump fires at the first
instant after the jump; of a local time that occurs twice, only the first occurrence fires).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import math
from collections import deque
from collections.abc import Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .admission import lane
from .definitions import Concurrency, WorkflowDefinition, check_tags, workflow_definition
from .errors import DefinitionError, ScheduleNotFoundError, StoreUnavailableError
from .models import (
    JSON,
    Run,
    RunSpec,
    RunStatus,
    SingletonGate,
    Started,
    StoredSchedule,
    WindowFire,
)
from .serialization import ENCODED, normalise
from .stores.base import Store

Overlap = Literal["allow", "skip", "buffer_one", "cancel_other"]
Catchup = Literal["latest", "skip", "all"]

_OVERLAPS = ("allow", "skip", "buffer_one", "cancel_other")
_CATCHUPS = ("latest", "skip", "all")
FIRE_BATCH = 5000  # due schedules taken per pass of the loop (one indexed query)
FIRE_CHUNK = 500  # fires per store operation
FIRE_PARALLEL = 2  # store operations in flight: the next chunk is built while one is written
KNOWN_MOST = 100_000  # parsed schedules kept between passes, at most
# The ``paused`` its code last declared, kept in a declared schedule's stored definition: a
# pause or resume made since stands until the code changes it.
DECLARED_PAUSED = "declared_paused"
Failures = list[Exception]  # (``Scheduler.list`` would shadow ``list`` in its annotations)
Fired = list[Started] | None
# A pass's windows by timing and awaited window: the due ones and the next one after them.
Windows = dict[tuple[Any, ...], tuple[list[datetime], datetime]]


@dataclass(frozen=True)
class Schedule:
    """When to start which workflow: exactly one of ``cron`` and ``every``.

    ``cron``: 5 fields, or 6 with seconds first, in ``timezone``. ``every``: whole seconds (or
    a ``timedelta``); its windows are the multiples of ``every`` since the Unix epoch.
    ``overlap`` says what a window does while the previous window's run is still active;
    ``catchup`` which windows fire after no engine drove the schedule for a while;
    ``jitter`` delays each window's start by a stable amount in ``[0, jitter)`` seconds;
    ``concurrency`` replaces the workflow's quota for the schedule's runs (a fixed key and
    limit, since it is stored).
    """

    id: str
    workflow: Any
    cron: str | None = None
    every: float | timedelta | None = None
    timezone: str = "UTC"
    input: JSON = None
    overlap: Overlap = "allow"
    catchup: Catchup = "latest"
    max_catchup: int = 10
    jitter: float = 0.0
    concurrency: Concurrency | None = None
    priority: int = 0
    tags: tuple[str, ...] = ()
    paused: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or ":" in self.id:
            raise DefinitionError(
                f"a schedule id must be a non-empty string without ':', not {self.id!r}"
            )
        if not isinstance(self.workflow, str):
            object.__setattr__(self, "workflow", workflow_definition(self.workflow).name)
        if (self.cron is None) == (self.every is None):
            raise DefinitionError(f"schedule {self.id!r} needs exactly one of cron and every")
        if self.every is not None:
            object.__setattr__(self, "every", _whole_seconds(self.id, self.every))
        _check_options(self)
        object.__setattr__(self, "tags", check_tags(self.tags))
        object.__setattr__(self, "input", normalise(self.input, f"input of schedule {self.id!r}"))
        zone = self.zone  # an unknown time zone is refused whether cron uses it or not
        if self.cron is not None:
            _cron(self.cron, zone, self.id)

    @property
    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise DefinitionError(
                f"schedule {self.id!r}: unknown time zone {self.timezone!r}"
            ) from None

    # ---------------------------------------------------------------- windows

    def windows_after(self, after: datetime) -> Iterator[datetime]:
        """The windows strictly after ``after``, in order, as UTC datetimes."""
        if self.every is not None:
            every = float(self.every)  # type: ignore[arg-type]
            n = math.floor(after.timestamp() / every) + 1
            while True:
                yield datetime.fromtimestamp(n * every, UTC)
                n += 1
        assert self.cron is not None
        zone = self.zone
        for local in _cron(self.cron, zone, self.id, after.astimezone(zone)):
            if not _second_of_a_repeated_hour(local):
                yield local.astimezone(UTC)

    def next_window(self, after: datetime) -> datetime:
        return next(self.windows_after(after))

    def delay(self, window: datetime) -> timedelta:
        """The window's jitter: stable (the same on every engine), in ``[0, jitter)`` seconds."""
        if self.jitter <= 0:
            return timedelta(0)
        digest = hashlib.sha256(f"{self.id}|{window.isoformat()}".encode()).digest()
        fraction = int.from_bytes(digest[:8], "big") / 2**64
        return timedelta(seconds=fraction * self.jitter)

    def timing(self) -> tuple[Any, ...]:
        """What decides the windows: a change of it restarts the schedule's timing."""
        return (self.cron, self.every, self.timezone, self.jitter)

    # ---------------------------------------------------------------- stored form

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record.pop("paused")
        record["tags"] = list(self.tags)
        quota = self.concurrency
        record["concurrency"] = None if quota is None else _quota_record(quota)
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any], paused: bool) -> Schedule:
        values = dict(record)
        quota = values.pop("concurrency", None)
        values["concurrency"] = (
            None
            if quota is None
            else Concurrency(quota["key"], quota["limit"], quota.get("statuses"))
        )
        values["tags"] = tuple(values.get("tags") or ())
        values.pop(DECLARED_PAUSED, None)
        stored_input = values.get("input")
        if type(stored_input) is not dict or ENCODED not in stored_input:
            return cls(**values, paused=paused)
        # An input still encoded (read without the codec's key) is kept as it was stored.
        schedule = cls(**{**values, "input": None}, paused=paused)
        object.__setattr__(schedule, "input", stored_input)
        return schedule


def _quota_record(quota: Concurrency) -> dict[str, Any]:
    # Default statuses stay unnamed (None), so the stored schedule reads back equal to the
    # declared one and follows the engine's active statuses rather than a copy of them.
    counted = quota.count_statuses
    statuses = None if counted is None else sorted(RunStatus(s) for s in counted)
    return {"key": quota.key, "limit": quota.limit, "statuses": statuses}


def _whole_seconds(schedule_id: str, every: float | timedelta) -> float:
    seconds = every.total_seconds() if isinstance(every, timedelta) else every
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise DefinitionError(f"schedule {schedule_id!r}: every must be seconds or a timedelta")
    if seconds < 1 or seconds != int(seconds):
        raise DefinitionError(
            f"schedule {schedule_id!r}: every must be a whole number of seconds, at least 1"
            f" (a window's run id names its second), not {every!r}"
        )
    return float(seconds)


def _check_options(schedule: Schedule) -> None:
    problems = []
    if schedule.overlap not in _OVERLAPS:
        problems.append(f"overlap must be one of {_OVERLAPS}")
    if schedule.catchup not in _CATCHUPS:
        problems.append(f"catchup must be one of {_CATCHUPS}")
    if not isinstance(schedule.max_catchup, int) or schedule.max_catchup < 1:
        problems.append("max_catchup must be at least 1")
    if not isinstance(schedule.jitter, int | float) or schedule.jitter < 0:
        problems.append("jitter must be a number of seconds, not negative")
    if not isinstance(schedule.priority, int):
        problems.append("priority must be an int")
    quota = schedule.concurrency
    if quota is not None and not (isinstance(quota.key, str) and isinstance(quota.limit, int)):
        problems.append("concurrency must have a fixed key and limit (the schedule is stored)")
    if problems:
        raise DefinitionError(f"schedule {schedule.id!r}: " + "; ".join(problems))


def _cron(
    expression: str, zone: ZoneInfo, schedule_id: str, start: datetime | None = None
) -> CronSim:
    if not isinstance(expression, str) or len(expression.split()) not in (5, 6):
        raise DefinitionError(
            f"schedule {schedule_id!r}: cron must have 5 fields, or 6 with seconds first,"
            f" not {expression!r}"
        )
    try:
        return CronSim(expression, start or datetime.now(zone))
    except CronSimError as exc:
        raise DefinitionError(
            f"schedule {schedule_id!r}: invalid cron {expression!r}: {exc}"
        ) from None


def _second_of_a_repeated_hour(local: datetime) -> bool:
    """A local time of the hour that occurs twice (clocks going back), its second occurrence."""
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def window_id(schedule_id: str, window: datetime) -> str:
    return f"sched:{schedule_id}:{_second_text(window)}"


@functools.lru_cache(maxsize=1024)
def _second_text(window: datetime) -> str:
    """A window's second as run ids name it: made once for the many schedules sharing it (a
    ``strftime`` takes 3-4 us)."""
    return f"{window.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def manual_id(schedule_id: str, now: datetime) -> str:
    return f"sched:{schedule_id}:manual:{now.astimezone(UTC):%Y%m%dT%H%M%S%fZ}"


# ---------------------------------------------------------------- what the store holds


@dataclass(frozen=True)
class ScheduleState:
    """A schedule as stored, with its timing and its last fire."""

    schedule: Schedule
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_run_id: str | None
    last_error: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    next_window_at: datetime | None = None

    def __getattr__(self, name: str) -> Any:
        # The schedule's fields read as the state's own (state.cron, state.workflow, ...).
        if name == "schedule":
            raise AttributeError(name)
        return getattr(self.schedule, name)

    @property
    def paused(self) -> bool:
        return self.schedule.paused


def state_of(row: StoredSchedule) -> ScheduleState:
    return ScheduleState(
        Schedule.from_record(row.definition, row.paused),
        row.next_fire_at,
        row.last_fire_at,
        row.last_run_id,
        row.last_error,
        row.created_at,
        row.updated_at,
        row.next_window_at,
    )


# ---------------------------------------------------------------- the engine's side


class SchedulerHost(Protocol):
    """What the scheduler needs from its engine."""

    @property
    def store(self) -> Store: ...

    def now(self) -> datetime: ...

    async def ready(self) -> None:
        """Open the engine's store (and transport) if it is not yet."""

    def workflow_definition(self, workflow: str) -> WorkflowDefinition: ...

    def served_workflows(self) -> Collection[str]:
        """The workflows whose schedules this engine fires (those it serves)."""
        ...

    async def gated_spec(
        self,
        definition: WorkflowDefinition,
        input: JSON,
        run_id: str,
        *,
        concurrency: Concurrency | None,
        priority: int,
        tags: Sequence[str],
        singleton: SingletonGate | None,
    ) -> RunSpec: ...

    async def created(self, started: Sequence[Started]) -> None:
        """Runs a fire created: have them executed (here or through the run queue)."""

    def fire_grace(self) -> float:
        """Seconds a window may be late and still count as on time (not as missed)."""


class Scheduler:
    """``engine.schedules``: schedules in the store, and the firing of their windows."""

    def __init__(self, host: SchedulerHost) -> None:
        self._host = host
        self.backlog = False  # the last pass left due schedules behind
        self._known: dict[str, tuple[dict[str, Any], Schedule]] = {}

    async def upsert(self, schedule: Schedule) -> ScheduleState:
        """Store a schedule (new, or a new definition of an existing one) and return it.

        A new schedule's first window is its first fire time after now; a changed timing
        (cron, every, time zone, jitter) restarts from now; otherwise the next window stays.
        """
        self._host.workflow_definition(schedule.workflow)  # UnknownWorkflowError first
        return await self._save(schedule)

    async def _save(self, schedule: Schedule, declared: bool | None = None) -> ScheduleState:
        await self._host.ready()
        existing = await self._host.store.get_schedule(schedule.id)
        row = _row_for(schedule, existing, self._host.now())
        if declared is not None:
            row = replace(row, definition={**row.definition, DECLARED_PAUSED: declared})
        saved = await self._host.store.save_schedule(row)
        self._known[saved.id] = (saved.definition, schedule)
        return state_of(saved)

    async def declare(self, schedule: Schedule) -> ScheduleState:
        """A schedule declared in code, when its engine opens: stored as declared, but a pause
        or resume made since (an operator's) stands until the code changes its own ``paused``."""
        self._host.workflow_definition(schedule.workflow)  # UnknownWorkflowError first
        await self._host.ready()
        existing = await self._host.store.get_schedule(schedule.id)
        paused = _declared_pause(schedule.paused, existing)
        return await self._save(replace(schedule, paused=paused), declared=schedule.paused)

    async def get(self, schedule_id: str) -> ScheduleState | None:
        await self._host.ready()
        row = await self._host.store.get_schedule(schedule_id)
        return None if row is None else state_of(row)

    async def list(self) -> list[ScheduleState]:
        await self._host.ready()
        return [state_of(row) for row in await self._host.store.list_schedules()]

    async def pause(self, schedule_id: str) -> ScheduleState:
        """Stop firing; windows that pass while paused never fire."""
        state = await self._required(schedule_id)
        return await self._save(replace(state.schedule, paused=True))

    async def resume(self, schedule_id: str) -> ScheduleState:
        """Fire again, from the first window after now."""
        state = await self._required(schedule_id)
        return await self._save(replace(state.schedule, paused=False))

    async def delete(self, schedule_id: str) -> bool:
        await self._host.ready()
        return await self._host.store.delete_schedule(schedule_id)

    async def trigger(self, schedule_id: str) -> Run:
        """Start one run of the schedule now (its gates apply, as to a window's run)."""
        await self._host.ready()
        schedule = (await self._required(schedule_id)).schedule
        spec = await self._spec(schedule, manual_id(schedule_id, self._host.now()))
        [started] = await self._host.store.create_runs([spec], self._host.now())
        if started.rejected is not None:
            raise started.rejected
        await self._host.created([started])
        assert started.run is not None
        return started.run

    async def _required(self, schedule_id: str) -> ScheduleState:
        state = await self.get(schedule_id)
        if state is None:
            raise ScheduleNotFoundError(schedule_id)
        return state

    # ---------------------------------------------------------------- firing

    async def fire_due(self) -> int:
        """Fire every due window (one indexed query for the due schedules); windows fired.

        The due schedules that fire one window or none (a driven schedule's usual pass) go
        together, in one store operation (``Store.fire_windows``); one with several windows to
        catch up fires them one compare-and-set each, oldest first. ``backlog`` tells whether
        the pass left due schedules behind (the loop then comes back at once)."""
        await self._host.ready()
        now = self._host.now()
        served = self._host.served_workflows()
        rows = await self._host.store.due_schedules(now, FIRE_BATCH, workflows=served)
        self.backlog = len(rows) >= FIRE_BATCH
        failures: Failures = []
        plans = self._plans(rows, now, failures)
        single = [p for p in plans if len(p.chosen) <= 1]
        gate = asyncio.Semaphore(FIRE_PARALLEL)

        async def fire(chunk: Sequence[_Plan]) -> int:
            fires = await self._fires(chunk, failures)
            async with gate:
                return await self._fire_batch(fires, now, failures)

        chunks = [single[i : i + FIRE_CHUNK] for i in range(0, len(single), FIRE_CHUNK)]
        fired = sum(await asyncio.gather(*(fire(chunk) for chunk in chunks)))
        for plan in (p for p in plans if len(p.chosen) > 1):
            try:
                fired += await self._fire_chain(plan, now)
            except Exception as exc:  # every schedule has its go; the first failure is the pass's
                failures.append(exc)
        if failures:
            raise failures[0]
        return fired

    def _plans(
        self, rows: Sequence[StoredSchedule], now: datetime, failures: Failures
    ) -> Sequence[_Plan]:
        """What to fire of each due schedule; one that cannot be read here (a time zone this
        host lacks) is left out, and its error reported after the others fired."""
        plans = []
        on_time_since = now - timedelta(seconds=self._host.fire_grace())
        # Schedules on the same timing awaiting the same window have the same windows: many
        # schedules "every minute" are worked out once per pass, not once each.
        windows: Windows = {}
        for row in rows:
            try:
                plans.append(self._plan(row, now, on_time_since, windows))
            except Exception as exc:
                failures.append(exc)
        return plans

    def _plan(
        self,
        row: StoredSchedule,
        now: datetime,
        on_time_since: datetime,
        windows: Windows,
    ) -> _Plan:
        schedule = self._schedule_of(row)
        assert row.next_window_at is not None
        first = row.next_window_at
        key = (schedule.cron, schedule.every, schedule.timezone, schedule.max_catchup, first)
        known = windows.get(key)
        if known is None:
            due = _due_windows(schedule, first, now)
            known = windows[key] = (due, schedule.next_window(max(now, due[-1])))
        due, future = known
        return _Plan(schedule, first, _to_fire(schedule, due, on_time_since), future)

    def _schedule_of(self, row: StoredSchedule) -> Schedule:
        """The row's schedule, parsed (and validated) again only when its definition changed:
        a pass over thousands of due schedules would spend a third of its time there."""
        known = self._known.get(row.id)
        if known is not None and known[0] == row.definition and known[1].paused == row.paused:
            return known[1]
        if len(self._known) >= KNOWN_MOST:
            self._known.clear()
        schedule = Schedule.from_record(row.definition, row.paused)
        self._known[row.id] = (row.definition, schedule)
        return schedule

    async def _fires(self, plans: Sequence[_Plan], failures: Failures) -> Sequence[WindowFire]:
        """The batch's fires; a schedule whose run cannot be specified (a key function that
        raised) is left out, and its error reported after the others fired."""
        fires: list[WindowFire] = []
        for plan in plans:
            try:
                window = plan.chosen[0] if plan.chosen else None
                fires.append(await self._fire_of(plan, plan.expected, window))
            except Exception as exc:
                failures.append(exc)
        return fires

    async def _fire_of(
        self,
        plan: _Plan,
        expected: datetime,
        window: datetime | None,
        after: datetime | None = None,
    ) -> WindowFire:
        """The compare-and-set from ``expected`` on to ``after`` (the schedule's first future
        window by default), starting the run of ``window`` if there is one."""
        after = plan.future if after is None else after
        schedule = plan.schedule
        spec = None if window is None else await self._window_spec(schedule, window)
        return WindowFire(schedule.id, expected, after, after + schedule.delay(after), spec, window)

    async def _fire_batch(
        self, fires: Sequence[WindowFire], now: datetime, failures: Failures
    ) -> int:
        if not fires:
            return 0
        try:
            results = await self._host.store.fire_windows(fires, now)
        except StoreUnavailableError:
            raise
        except Exception:
            # One schedule's data failed the batch (the store wrote none of it): each goes
            # alone, so that one fails alone and the others still fire.
            results = []
            for fire in fires:
                try:
                    results.append(await self._fire_alone(fire, now))
                except Exception as exc:
                    failures.append(exc)
        # None: another engine fired it, or it was paused or changed.
        started = [one for result in results if result for one in result]
        if started:
            await self._host.created(started)
        return len(started)

    async def _fire_alone(self, fire: WindowFire, now: datetime) -> Fired:
        return await self._host.store.fire_schedule(
            fire.schedule_id,
            expected=fire.expected,
            next_window=fire.next_window,
            next_fire=fire.next_fire,
            specs=[] if fire.spec is None else [fire.spec],
            now=now,
            window=fire.window,
        )

    async def _fire_chain(self, plan: _Plan, now: datetime) -> int:
        """Several windows of one schedule, each its own compare-and-set, oldest first; the
        last one moves the schedule to its first future window."""
        expected, fired, chosen = plan.expected, 0, plan.chosen
        for i, window in enumerate(chosen):
            after = chosen[i + 1] if i + 1 < len(chosen) else plan.future
            started = await self._fire_alone(
                await self._fire_of(plan, expected, window, after), now
            )
            if started is None:  # another engine fired it, or it was paused or changed
                return fired
            fired += len(started)
            await self._host.created(started)
            expected = after
        return fired

    async def _window_spec(self, schedule: Schedule, window: datetime) -> RunSpec:
        return await self._spec(schedule, window_id(schedule.id, window))

    async def _spec(self, schedule: Schedule, run_id: str) -> RunSpec:
        definition = self._host.workflow_definition(schedule.workflow)
        return await self._host.gated_spec(
            definition,
            schedule.input,
            run_id,
            concurrency=schedule.concurrency,
            priority=schedule.priority,
            tags=(*schedule.tags, f"schedule:{schedule.id}"),
            singleton=overlap_gate(schedule, definition),
        )


@dataclass(frozen=True)
class _Plan:
    """What a pass does with one due schedule: the windows it fires, and where it moves on to."""

    schedule: Schedule
    expected: datetime  # the window the schedule's row awaits (its compare-and-set)
    chosen: list[datetime]
    future: datetime


def _declared_pause(declared: bool, existing: StoredSchedule | None) -> bool:
    """Whether a schedule declared ``paused=declared`` is paused: as declared when it is new or
    its code changed ``paused`` since its last declaration; else as it stands in the store."""
    if existing is None:
        return declared
    before = existing.definition.get(DECLARED_PAUSED)
    return declared if before is not None and before != declared else existing.paused


def _row_for(schedule: Schedule, existing: StoredSchedule | None, now: datetime) -> StoredSchedule:
    keep = (
        existing is not None
        and not schedule.paused
        and not existing.paused
        and existing.next_window_at is not None
        and Schedule.from_record(existing.definition, existing.paused).timing() == schedule.timing()
    )
    if keep:
        assert existing is not None
        window, fire = existing.next_window_at, existing.next_fire_at
    elif schedule.paused:
        window = fire = None
    else:
        window = schedule.next_window(now)
        fire = window + schedule.delay(window)
    return StoredSchedule(
        id=schedule.id,
        definition=schedule.to_record(),
        paused=schedule.paused,
        next_window_at=window,
        next_fire_at=fire,
        created_at=existing.created_at if existing is not None else now,
        updated_at=now,
    )


def _due_windows(schedule: Schedule, first: datetime, now: datetime) -> list[datetime]:
    """The windows from ``first`` up to ``now``: the first, and the most recent ``max_catchup``
    after it (a schedule idle for a year has many windows behind it)."""
    if schedule.every is not None:
        every = float(schedule.every)  # type: ignore[arg-type]
        last = math.floor(now.timestamp() / every) * every
        count = round((last - first.timestamp()) / every)
        keep = min(count, schedule.max_catchup)
        recent = [datetime.fromtimestamp(last - (keep - 1 - i) * every, UTC) for i in range(keep)]
        return [first, *recent]
    kept: deque[datetime] = deque(maxlen=schedule.max_catchup)
    for window in schedule.windows_after(first):
        if window > now:
            break
        kept.append(window)
    return [first, *kept]


def _to_fire(schedule: Schedule, due: list[datetime], on_time_since: datetime) -> list[datetime]:
    """Which due windows start a run. While an engine drives the schedule, windows are fired at
    most a poll late: all of them fire. Once the oldest is older than that, they passed while
    nobody drove it, and ``catchup`` decides: the most recent, none, or the last few."""
    if due[0] >= on_time_since:
        return due
    if schedule.catchup == "skip":
        return []
    if schedule.catchup == "latest":
        return due[-1:]
    return due[-schedule.max_catchup :]


def overlap_gate(schedule: Schedule, definition: WorkflowDefinition) -> SingletonGate | None:
    """The singleton lane of the schedule's runs for its overlap policy; None: the workflow's
    own gate (``allow``). The schedule's lane replaces the workflow's singleton for them."""
    if schedule.overlap == "allow":
        return None
    depth = {"skip": 0, "buffer_one": 1, "cancel_other": None}[schedule.overlap]
    key = f"schedule:{schedule.id}"
    return SingletonGate(
        lane("global", "", key), 1, depth, replace=schedule.overlap == "cancel_other", user_key=key
    )


__all__ = [
    "Schedule",
    "ScheduleState",
    "Scheduler",
    "manual_id",
    "overlap_gate",
    "state_of",
    "window_id",
]
