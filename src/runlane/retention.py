"""Retention: how long settled runs are kept, and the pruning that driving engines do.

A ``Retention`` on the engine (``Engine(retention=Retention(completed=timedelta(days=7)))``)
gives each terminal status a period; a run settled longer ago than its status's period is
deleted with its step records, signals and step-queue entries (``Store.prune_runs``), and a
published event older than ``events`` leaves the engine's event log (``Store.prune_events``). Pruning
is a phase of the driving loop that runs beside the turns, never in front of them: one batch
at a time, a short pause between batches while a backlog lasts, then one pass per interval.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .definitions import Seconds, as_seconds
from .errors import DefinitionError
from .models import RunStatus

log = logging.getLogger(__name__)

CATCH_UP_PAUSE = 0.25
"""Seconds between two batches while settled runs past their period remain."""


@dataclass(frozen=True)
class Retention:
    """How long settled runs are kept, per terminal status (seconds or a timedelta; None keeps
    them forever). ``dead`` defaults to ``failed``'s period. ``events``: how long published
    events are kept; by default as long as the longest period given (None with no period
    given: kept forever). Driving engines delete at most ``batch`` runs (and ``batch`` events)
    at a time, and look for due ones every ``interval`` seconds."""

    completed: Seconds | None = None
    failed: Seconds | None = None
    cancelled: Seconds | None = None
    dead: Seconds | None = None
    batch: int = 500
    interval: Seconds = 60.0
    events: Seconds | None = None

    def __post_init__(self) -> None:
        for name, value in {**self.periods(), "events": self.events}.items():
            if value is not None and not _duration(value):
                raise DefinitionError(f"Retention.{name} must be >= 0 seconds, got {value!r}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise DefinitionError(f"Retention.batch must be at least 1, got {self.batch!r}")
        if not _duration(self.interval) or as_seconds(self.interval) <= 0:
            raise DefinitionError(f"Retention.interval must be positive, got {self.interval!r}")

    def periods(self) -> dict[str, Seconds | None]:
        dead = self.dead if self.dead is not None else self.failed
        return {
            "completed": self.completed,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "dead": dead,
        }

    def cutoffs(self, now: datetime) -> dict[RunStatus, datetime]:
        """The instant before which a run of each kept-for-a-while status is due."""
        return {
            RunStatus(name): now - timedelta(seconds=as_seconds(value))
            for name, value in self.periods().items()
            if value is not None
        }

    def events_cutoff(self, now: datetime) -> datetime | None:
        """The instant before which a published event is due; None keeps events forever."""
        given = [as_seconds(v) for v in self.periods().values() if v is not None]
        if self.events is not None:
            return now - timedelta(seconds=as_seconds(self.events))
        return now - timedelta(seconds=max(given)) if given else None


def older_than(period: Seconds, now: datetime) -> dict[RunStatus, datetime]:
    """Every terminal status past ``period`` (what ``runlane runs prune --older-than`` asks)."""
    everything = Retention(period, period, period, period)
    return everything.cutoffs(now)


def _duration(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        return False
    return as_seconds(value) >= 0


Prune = Callable[[dict[RunStatus, datetime], int], Awaitable[list[str]]]
PruneEvents = Callable[[datetime, int], Awaitable[int]]


@dataclass(frozen=True)
class Pruned:
    """What one batch deleted: the settled runs' ids and how many events."""

    runs: list[str]
    events: int = 0

    def full(self, batch: int) -> bool:
        """Whether the batch was full, so more may be due at once."""
        return len(self.runs) >= batch or self.events >= batch


class Pruner:
    """The retention phase of one engine: when the next batch is due, and running it."""

    def __init__(
        self,
        retention: Retention,
        prune: Prune,
        prune_events: PruneEvents,
        now: Callable[[], datetime],
    ) -> None:
        self.retention = retention
        self._prune = prune
        self._prune_events = prune_events
        self._now = now
        self._next: datetime | None = None
        self.deleted = 0
        self.events_deleted = 0

    def due(self) -> bool:
        return self._next is None or self._now() >= self._next

    async def run_batch(self) -> Pruned:
        """Delete one batch of due runs and one of due events; the next batch comes soon if
        either was full."""
        now = self._now()
        limit = self.retention.batch
        try:
            gone = Pruned(await self._prune(self.retention.cutoffs(now), limit))
            before = self.retention.events_cutoff(now)
            if before is not None:
                gone = Pruned(gone.runs, await self._prune_events(before, limit))
        except Exception:
            # A failed prune is retried at the next interval; the hot path never sees it.
            self._next = now + timedelta(seconds=as_seconds(self.retention.interval))
            raise
        pause = CATCH_UP_PAUSE if gone.full(limit) else as_seconds(self.retention.interval)
        self._next = now + timedelta(seconds=pause)
        self.deleted += len(gone.runs)
        self.events_deleted += gone.events
        if gone.runs or gone.events:
            log.debug("pruned %d settled runs, %d events", len(gone.runs), gone.events)
        return gone


__all__ = ["Pruned", "Pruner", "Retention", "older_than"]
