"""``lanes.lanes``: the overview built from the members a store reads, whatever their order."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from runlane.admission import lane, scoped_key
from runlane.lanes import lanes
from runlane.models import LaneMember, RunStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _member(
    kind: str, name: str, run_id: str, holds: bool, place: int, of: int, limit: int | None
) -> LaneMember:
    status = RunStatus.RUNNING if holds else RunStatus.BLOCKED
    return LaneMember(kind, name, run_id, "wf", status, T0, holds, place, of, limit)


def test_each_lane_lists_its_holders_and_waiters_in_place_order_whatever_the_rows_order() -> None:
    key = lane("workflow", "sync", "store-7")
    scoped = scoped_key("eu", lane("workflow", "sync", "store-1"))  # a namespace's own lane
    members = [
        _member("singleton", key, "h1", True, 1, 2, 2),
        _member("singleton", key, "h2", True, 2, 2, 2),
        *(_member("singleton", key, f"w{p}", False, p, 9, 2) for p in (1, 2, 3)),
        _member("singleton", scoped, "s1", True, 1, 1, 1),
        _member("concurrency", "tenant:acme", "q1", True, 1, 8, 8),
        _member("concurrency", "tenant:acme", "q2", True, 2, 8, 8),
        _member("concurrency", "tenant:acme", "q9", False, 1, 1, 8),  # not counted: seen only
    ]
    expected = lanes(members)
    for seed in range(5):
        shuffled = members[:]
        random.Random(seed).shuffle(shuffled)
        assert lanes(shuffled) == expected
    # Singleton lanes first, then quotas, each kind by the key shown.
    assert [(x.kind, x.key) for x in expected] == [
        ("singleton", "store-1"),
        ("singleton", "store-7"),
        ("concurrency", "tenant:acme"),
    ]
    scoped_lane, sync, quota = expected
    assert (scoped_lane.namespace, scoped_lane.workflow, scoped_lane.usage) == ("eu", "sync", 1)
    assert [m.run_id for m in sync.holders] == ["h1", "h2"]
    assert [m.run_id for m in sync.waiters] == ["w1", "w2", "w3"]
    assert (sync.workflow, sync.limit, sync.usage, sync.waiting) == ("sync", 2, 2, 9)
    assert not sync.complete  # three of nine waiters listed
    assert [m.run_id for m in quota.holders] == ["q1", "q2"]
    assert (quota.workflow, quota.waiters, quota.usage, quota.limit) == (None, (), 8, 8)
