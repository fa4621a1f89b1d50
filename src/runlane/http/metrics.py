"""``GET /metrics``: the engine's counters and the store's gauges in Prometheus text.

Counters and histograms come from the engine's :class:`runlane.stats.EngineStats` (per
process). Gauges are read from the store at scrape time, but at most once per ``ttl`` seconds:
scrapes in between, from any number of Prometheus servers, answer from the last read, so a
scrape never adds load to the database beyond one small read every few seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ..engine import Engine
from ..lanes import lanes, queue_lanes
from ..models import ACTIVE_STATUSES
from ..presence import unserved
from ..stats import Histogram

GAUGE_TTL = 5.0
"""Seconds a read of the store's gauges serves scrapes for."""

LANE_LABELS = ["key", "kind", "workflow", "namespace"]
"""A lane gauge's labels: the key as the rule gave it, and the namespace whose own lane it is
(empty for a lane every namespace shares), so two namespaces' lanes of one key stay apart."""


@dataclass(frozen=True)
class Gauges:
    """What the store said at one read."""

    active: dict[tuple[str, str], int] = field(default_factory=dict)  # (workflow, status)
    # (key, kind, workflow, namespace) -> (waiting, holding); a step queue's key is its name; the
    # namespace is the one whose own lane it is ("" for a lane every namespace shares)
    lanes: dict[tuple[str, str, str, str], tuple[int, int]] = field(default_factory=dict)
    # (workflow, version) -> active runs no live engine serves
    unserved: dict[tuple[str, str], int] = field(default_factory=dict)
    engines: dict[str, int] = field(default_factory=dict)  # "alive" / "gone" -> engines


class StoreGauges:
    """The gauges, read from the store at most once per ``ttl`` seconds."""

    def __init__(self, engine: Engine, ttl: float = GAUGE_TTL) -> None:
        self._engine = engine
        self._ttl = ttl
        self._lock = asyncio.Lock()
        self._read_at: float | None = None
        self.current = Gauges()

    async def refresh(self) -> Gauges:
        # One scrape reads; scrapes arriving meanwhile wait for its answer, not for their own.
        async with self._lock:
            if self._read_at is None or time.monotonic() - self._read_at >= self._ttl:
                self.current = await self._read()
                self._read_at = time.monotonic()
        return self.current

    async def _read(self) -> Gauges:
        engine = self._engine
        counts = await engine.read(lambda store: store.active_run_counts())
        # The counts are what the gauges need: one member of each lane carries them.
        members = await engine.read(lambda store: store.lane_members(1))
        views = await engine.read(lambda store: store.queue_views())
        found: dict[tuple[str, str, str, str], tuple[int, int]] = {}
        for lane in lanes(members):
            labels = (lane.key, lane.kind, lane.workflow or "", lane.namespace or "")
            found[labels] = (lane.waiting, lane.usage)
        for queue in queue_lanes(views, engine.now()):
            found[queue.name, "queue", "", ""] = (len(queue.waiters), queue.usage)
        active = {(workflow, str(status)): n for (workflow, status), n in counts.items()}
        engines = await engine.list_engines()
        codes = await engine.read(lambda store: store.active_code_counts())
        states = {"alive": sum(e.alive for e in engines), "gone": sum(not e.alive for e in engines)}
        return Gauges(active, found, unserved(codes, engines), states)


class RunlaneCollector(Collector):
    """The families docs/features/observability.md lists, from one engine's stats and the last
    gauge read."""

    def __init__(self, engine: Engine, gauges: StoreGauges) -> None:
        self._engine = engine
        self._gauges = gauges

    def collect(self) -> Iterator[Metric]:
        stats = self._engine.stats
        started = CounterMetricFamily(
            "runlane_runs_started", "Runs this process started.", labels=["workflow"]
        )
        for workflow, n in sorted(stats.runs_started.items()):
            started.add_metric([workflow], n)
        finished = CounterMetricFamily(
            "runlane_runs_finished",
            "Runs this process's turns settled, by final status.",
            labels=["workflow", "status"],
        )
        for (workflow, status), n in sorted(stats.runs_finished.items()):
            finished.add_metric([workflow, status], n)
        refused = CounterMetricFamily(
            "runlane_starts_refused",
            "Starts this process was refused: concurrency, singleton_queue_full, rate_limit.",
            labels=["workflow", "reason"],
        )
        for (workflow, reason), n in sorted(stats.starts_refused.items()):
            refused.add_metric([workflow, reason], n)
        yield from (started, finished, refused)
        yield from self._histograms()
        yield from self._store_gauges()

    def _histograms(self) -> Iterator[Metric]:
        stats = self._engine.stats
        steps = HistogramMetricFamily(
            "runlane_step_duration_seconds",
            "Wall time of local step attempts in this process, failed ones included.",
            labels=["workflow", "step"],
        )
        for labels, histogram in sorted(stats.step_duration.items()):
            steps.add_metric(list(labels), *_buckets(histogram))
        handoff = HistogramMetricFamily(
            "runlane_handoff_seconds",
            "From a settlement freeing a lane's slot to the next run's turn starting here.",
            labels=["workflow"],
        )
        for workflow, histogram in sorted(stats.handoff.items()):
            handoff.add_metric([workflow], *_buckets(histogram))
        yield from (steps, handoff)

    def _store_gauges(self) -> Iterator[Metric]:
        gauges = self._gauges.current
        active = GaugeMetricFamily(
            "runlane_active_runs",
            "Active runs in the store, by workflow and status (read at most every few seconds).",
            labels=["workflow", "status"],
        )
        seen = {workflow for workflow, _ in gauges.active}
        for workflow in sorted(seen):
            for status in sorted(ACTIVE_STATUSES):
                active.add_metric([workflow, str(status)], gauges.active.get((workflow, status), 0))
        waiting = GaugeMetricFamily(
            "runlane_lane_waiting",
            "Runs (or, for a step queue, steps) waiting in each lane.",
            labels=LANE_LABELS,
        )
        holding = GaugeMetricFamily(
            "runlane_lane_holding",
            "Slots held in each lane (runs counted, for a quota).",
            labels=LANE_LABELS,
        )
        for labels, (waiters, holders) in sorted(gauges.lanes.items()):
            waiting.add_metric(list(labels), waiters)
            holding.add_metric(list(labels), holders)
        yield from (active, waiting, holding)
        yield from self._fleet_gauges(gauges)

    def _fleet_gauges(self, gauges: Gauges) -> Iterator[Metric]:
        unserved_runs = GaugeMetricFamily(
            "runlane_runs_unserved",
            "Active runs of a (workflow, version) that no live engine serves: they wait for an"
            " engine with that code.",
            labels=["workflow", "version"],
        )
        for (workflow, version), n in sorted(gauges.unserved.items()):
            unserved_runs.add_metric([workflow, version], n)
        engines = GaugeMetricFamily(
            "runlane_engines",
            "Engines announced in the store: alive (beat within three leases) or gone.",
            labels=["state"],
        )
        for state, n in sorted(gauges.engines.items()):
            engines.add_metric([state], n)
        yield from (unserved_runs, engines)


def _buckets(histogram: Histogram) -> tuple[list[tuple[str, float]], float]:
    cumulative, buckets = 0, []
    for bound, n in zip((*histogram.bounds, float("inf")), histogram.counts, strict=True):
        cumulative += n
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(cumulative)))
    return buckets, histogram.total


class Metrics:
    """The ``/metrics`` endpoint of one app: its own registry, never the process-wide one."""

    def __init__(self, engine: Engine, ttl: float = GAUGE_TTL) -> None:
        self.gauges = StoreGauges(engine, ttl)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RunlaneCollector(engine, self.gauges))

    async def text(self) -> tuple[bytes, str]:
        await self.gauges.refresh()
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["GAUGE_TTL", "Metrics", "RunlaneCollector", "StoreGauges"]
