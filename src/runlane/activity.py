"""What the runs did lately, as an operator's overview shows it: runs started and settled each
minute, failures, and how long settled runs took from their start (a pure view over
``Store.run_activity``).

Latency is counted in fixed buckets (``LATENCY_BOUNDS``) by the store, so an hour of a busy
fleet is a few hundred counts, never its runs; a percentile is then the upper bound of the
bucket it falls in.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from .models import RunStatus

LATENCY_BOUNDS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0, 3600.0)
"""Upper bounds, in seconds, of the latency buckets the stores count settled runs in: bucket
``i`` holds the runs that took at most ``LATENCY_BOUNDS[i]`` (and more than the bound before);
bucket ``len(LATENCY_BOUNDS)`` those that took longer. The SQL stores spell the same bounds."""

FAILED = frozenset({RunStatus.FAILED, RunStatus.DEAD})


def latency_bucket(seconds: float) -> int:
    """The bucket of a run that took ``seconds`` from its creation to its settlement."""
    return bisect.bisect_left(LATENCY_BOUNDS, seconds)


def minute_of(moment: datetime) -> datetime:
    """The UTC minute ``moment`` falls in (its start)."""
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


@dataclass(frozen=True)
class ActivityCount:
    """How many runs were created (``status`` None) or settled with ``status`` in the minute
    that starts at ``minute``; a settled count is per latency ``bucket`` as well."""

    minute: datetime
    status: RunStatus | None
    bucket: int | None
    runs: int


@dataclass
class Minute:
    """One minute of the overview."""

    at: datetime
    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS) + 1))

    @property
    def settled(self) -> int:
        return self.completed + self.failed + self.cancelled

    def add(self, count: ActivityCount) -> None:
        if count.status is None:
            self.started += count.runs
            return
        if count.status == RunStatus.COMPLETED:
            self.completed += count.runs
        elif count.status in FAILED:
            self.failed += count.runs
        else:
            self.cancelled += count.runs
        if count.bucket is not None:
            self.latency[count.bucket] += count.runs


def minutes(counts: Iterable[ActivityCount], since: datetime, now: datetime) -> list[Minute]:
    """Every minute from ``since`` to ``now`` (the empty ones too), oldest first."""
    first, last = minute_of(since), minute_of(now)
    series = {}
    at = first
    while at <= last:
        series[at] = Minute(at)
        at += timedelta(minutes=1)
    for count in counts:
        slot = series.get(minute_of(count.minute))
        if slot is not None:
            slot.add(count)
    return list(series.values())


def percentile(latency: Sequence[int], share: float) -> float | None:
    """The upper bound of the bucket holding the ``share`` quantile (None: no run, or one
    beyond the last bound, ``inf``)."""
    total = sum(latency)
    if total == 0:
        return None
    wanted, seen = share * total, 0
    for bucket, runs in enumerate(latency):
        seen += runs
        if seen >= wanted and runs:
            return LATENCY_BOUNDS[bucket] if bucket < len(LATENCY_BOUNDS) else float("inf")
    return float("inf")  # pragma: no cover - the loop reaches the total


def totals(series: Sequence[Minute]) -> Counter[str]:
    """The series summed: started, completed, failed, cancelled."""
    found: Counter[str] = Counter()
    for minute in series:
        found.update(
            started=minute.started,
            completed=minute.completed,
            failed=minute.failed,
            cancelled=minute.cancelled,
        )
    return found


def latency_of(series: Sequence[Minute]) -> list[int]:
    """The series' latency buckets summed."""
    return [sum(m.latency[i] for m in series) for i in range(len(LATENCY_BOUNDS) + 1)]


__all__ = [
    "LATENCY_BOUNDS",
    "ActivityCount",
    "Minute",
    "latency_bucket",
    "latency_of",
    "minute_of",
    "minutes",
    "percentile",
    "totals",
]
