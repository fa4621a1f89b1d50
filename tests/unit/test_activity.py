"""The overview's arithmetic over a store's activity counts: minutes, totals, percentiles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane.activity import (
    LATENCY_BOUNDS,
    ActivityCount,
    latency_bucket,
    latency_of,
    minutes,
    percentile,
    totals,
)
from runlane.models import RunStatus

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_a_latency_falls_in_the_first_bucket_whose_bound_it_does_not_exceed() -> None:
    assert [latency_bucket(s) for s in (0, 0.1, 0.11, 3600, 3601)] == [0, 0, 1, 8, 9]
    assert len(LATENCY_BOUNDS) == 9


def test_every_minute_of_the_span_is_listed_and_counts_land_in_theirs() -> None:
    counts = [
        ActivityCount(T0, None, None, 4),
        ActivityCount(T0, RunStatus.COMPLETED, 1, 3),
        ActivityCount(T0 + timedelta(minutes=2), RunStatus.DEAD, 9, 1),
        ActivityCount(T0 + timedelta(minutes=2), RunStatus.FAILED, 2, 2),
        ActivityCount(T0 + timedelta(minutes=2), RunStatus.CANCELLED, 0, 1),
        ActivityCount(T0 - timedelta(minutes=5), None, None, 7),  # before the span: left out
    ]
    series = minutes(counts, T0 + timedelta(seconds=30), T0 + timedelta(minutes=2, seconds=5))
    assert [m.at for m in series] == [T0 + timedelta(minutes=n) for n in range(3)]
    assert [(m.started, m.completed, m.failed, m.cancelled) for m in series] == [
        (4, 3, 0, 0),
        (0, 0, 0, 0),
        (0, 0, 3, 1),
    ]
    assert totals(series) == {"started": 4, "completed": 3, "failed": 3, "cancelled": 1}
    assert latency_of(series) == [1, 3, 2, 0, 0, 0, 0, 0, 0, 1]


def test_a_percentile_is_the_upper_bound_of_the_bucket_it_falls_in() -> None:
    latency = [0, 3, 2, 0, 0, 0, 0, 0, 0, 1]
    assert percentile(latency, 0.5) == 0.5
    assert percentile(latency, 0.8) == 1.0
    assert percentile(latency, 0.99) == float("inf")
    assert percentile([0] * 10, 0.5) is None
