"""What one engine has done since its process started, as plain counters and histograms.

The engine counts here with no optional package involved (a dict update costs next to
nothing); ``runlane.http.metrics`` turns these into Prometheus families at scrape time.
Counters are per process, as Prometheus counters are: a restart starts them from zero.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from dataclasses import dataclass, field

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds, in seconds, of the histograms' buckets (``+Inf`` is implied)."""

HANDOFFS_TRACKED = 10_000
"""Runs at most whose hand-off is being timed; past it the oldest are forgotten."""


@dataclass
class Histogram:
    """Observations in cumulative-ready buckets: ``counts[i]`` holds those <= ``bounds[i]``
    and above the bound before; the last slot holds those above every bound."""

    bounds: tuple[float, ...] = DURATION_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)


class EngineStats:
    """One engine's counters (by label values) and histograms."""

    def __init__(self) -> None:
        self.runs_started: Counter[str] = Counter()  # by workflow
        self.runs_finished: Counter[tuple[str, str]] = Counter()  # by (workflow, status)
        self.starts_refused: Counter[tuple[str, str]] = Counter()  # by (workflow, reason)
        self.step_duration: dict[tuple[str, str], Histogram] = {}  # by (workflow, step)
        self.handoff: dict[str, Histogram] = {}  # by workflow
        self._handing_off: dict[str, float] = {}

    def started(self, workflow: str) -> None:
        self.runs_started[workflow] += 1

    def finished(self, workflow: str, status: str) -> None:
        self.runs_finished[workflow, status] += 1

    def refused(self, workflow: str, reason: str) -> None:
        self.starts_refused[workflow, reason] += 1

    def step_took(self, workflow: str, step: str, seconds: float) -> None:
        self.step_duration.setdefault((workflow, step), Histogram()).observe(seconds)

    def slot_freed(self, run_ids: list[str]) -> None:
        """A settlement freed a slot for ``run_ids``: their hand-off starts now."""
        now = time.monotonic()
        for run_id in run_ids:
            self._handing_off[run_id] = now
        while len(self._handing_off) > HANDOFFS_TRACKED:
            # Woken runs another engine claimed are never seen here again.
            del self._handing_off[next(iter(self._handing_off))]

    def turn_began(self, run_id: str, workflow: str, released: float | None = None) -> None:
        """A turn of ``run_id`` starts; if a freed slot woke it, its hand-off ends.

        A release this engine made is timed on its monotonic clock; one made elsewhere (another
        engine's settlement, a cancel) comes as ``released``: the seconds since the release's
        stamp in the store, by the engines' clocks (``ClaimOutcome.handed_off_at``)."""
        since = self._handing_off.pop(run_id, None)
        if since is not None:
            released = time.monotonic() - since
        if released is not None:
            self.handoff.setdefault(workflow, Histogram()).observe(max(0.0, released))


REFUSAL_REASONS = {
    "ConcurrencyLimitError": "concurrency",
    "SingletonQueueFullError": "singleton_queue_full",
    "RateLimitError": "rate_limit",
}
"""The ``reason`` label of ``runlane_starts_refused_total``, by the refusal's error class."""


__all__ = ["DURATION_BUCKETS", "REFUSAL_REASONS", "EngineStats", "Histogram"]
