"""Lanes over time: the serve process samples every lane's usage and waiters every few seconds
into a bounded ring in memory, for the console's lane charts.

The store keeps no history of lane usage, so this is what the console can honestly show: what
this process saw, since it started, at most ``keep`` samples back (30 minutes at the default
5 s). A restart starts it afresh, and two serve processes each keep their own. The lanes page
reads the lanes anyway, so a sample it takes is recorded too (no second read).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..engine import Engine
from ..lanes import AllLanes, all_lanes
from .shapes import jsonable

log = logging.getLogger(__name__)

INTERVAL = 5.0
KEEP = 360


@dataclass(frozen=True)
class Sample:
    """Every lane at one instant: ``lanes[name] = (kind, key, usage, limit, waiting)``."""

    at: datetime
    lanes: dict[str, tuple[str, str, int, int | None, int]]


def sample_of(found: AllLanes, at: datetime) -> Sample:
    """One sample of what ``all_lanes`` found: singleton and quota lanes, step queues, rate
    limits (starts in the window of the limit, throttled starts waiting), debounces."""
    lanes: dict[str, tuple[str, str, int, int | None, int]] = {}
    for lane in found.lanes:
        lanes[f"{lane.kind}:{lane.name}"] = (
            lane.kind, lane.key, lane.usage, lane.limit, lane.waiting,
        )  # fmt: skip
    for queue in found.queues:
        limit = queue.settings.concurrency
        lanes[f"queue:{queue.name}"] = ("queue", queue.name, queue.usage, limit, len(queue.waiters))
    for rate in found.rates:
        key = rate.key or rate.workflow or rate.name
        lanes[f"rate_limit:{rate.name}"] = (
            "rate_limit",
            key,
            rate.used,
            rate.limit,
            len(rate.held),
        )
    for debounce in found.debounces:
        key = debounce.key or debounce.workflow or debounce.name
        lanes[f"debounce:{debounce.name}"] = ("debounce", key, 0, None, 1)
    return Sample(at, lanes)


class LaneSampler:
    """A ring of lane samples, one every ``interval`` seconds at most."""

    def __init__(self, engine: Engine, interval: float = INTERVAL, keep: int = KEEP) -> None:
        self.engine = engine
        self.interval = interval
        self.samples: deque[Sample] = deque(maxlen=keep)
        self._task: asyncio.Task[None] | None = None

    def note(self, found: AllLanes, at: datetime) -> None:
        """Record lanes read for another reason, when a sample is due."""
        last = self.samples[-1].at if self.samples else None
        if last is None or (at - last).total_seconds() >= self.interval * 0.9:
            self.samples.append(sample_of(found, at))

    async def sample(self) -> None:
        now = self.engine.now()
        self.note(await self.engine.read(lambda store: all_lanes(store, now)), now)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            # An interval first: an application serving its own engine opens it meanwhile.
            await asyncio.sleep(self.interval)
            try:
                await self.sample()
            except Exception as exc:  # an outage costs samples, never the server
                log.debug("lane sample skipped: %s", exc)

    def history(self) -> dict[str, Any]:
        """``GET /lanes/history``: each lane's series, oldest sample first."""
        series: dict[str, dict[str, Any]] = {}
        for index, sample in enumerate(self.samples):
            for name, (kind, key, usage, limit, waiting) in sample.lanes.items():
                lane = series.setdefault(
                    name, {"name": name, "kind": kind, "key": key, "limit": limit, "points": []}
                )
                lane["limit"] = limit
                lane["points"].append([index, usage, waiting])
        return {
            "interval": self.interval,
            "keep": self.samples.maxlen,
            "times": [jsonable(s.at) for s in self.samples],
            "lanes": list(series.values()),
        }


__all__ = ["INTERVAL", "KEEP", "LaneSampler", "Sample", "sample_of"]
