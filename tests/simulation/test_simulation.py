"""The deterministic simulation (see cluster.py): memory and SQLite here, PostgreSQL slow. With
workers (workers.py): remote steps and a remote workflow's turns over a network that loses,
duplicates and delays tasks, results, decisions and beats, and workers that freeze and die;
``RUNLANE_SIM_EXAMPLES`` sets the deeper search's examples (the heavy tier)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from .cluster import MemoryCluster, PostgresCluster, SqliteCluster
from .workers import (
    GROUP,
    MemoryWorkerCluster,
    PostgresWorkerCluster,
    SqliteWorkerCluster,
    remote_executions,
)

TestMemoryCluster = MemoryCluster.TestCase
TestMemoryCluster.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
)

TestSqliteCluster = SqliteCluster.TestCase
TestSqliteCluster.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
)

TestPostgresCluster = pytest.mark.slow(PostgresCluster.TestCase)
TestPostgresCluster.settings = settings(
    max_examples=12, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
)

TestMemoryWorkerCluster = MemoryWorkerCluster.TestCase
TestMemoryWorkerCluster.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None, suppress_health_check=list(HealthCheck)
)

TestSqliteWorkerCluster = SqliteWorkerCluster.TestCase
TestSqliteWorkerCluster.settings = settings(
    max_examples=25, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
)

TestPostgresWorkerCluster = pytest.mark.slow(PostgresWorkerCluster.TestCase)
TestPostgresWorkerCluster.settings = settings(
    max_examples=8, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
)


class DeepMemoryWorkerCluster(MemoryWorkerCluster):
    """The deeper search: longer runs of more examples (the heavy tier only)."""


DEEP_EXAMPLES = int(os.environ.get("RUNLANE_SIM_EXAMPLES", "250"))
TestDeepMemoryWorkerCluster = pytest.mark.timeout(max(600, DEEP_EXAMPLES))(
    pytest.mark.slow(DeepMemoryWorkerCluster.TestCase)
)
TestDeepMemoryWorkerCluster.settings = settings(
    max_examples=DEEP_EXAMPLES,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def test_a_beating_workers_step_is_not_sent_again_however_long_it_runs() -> None:
    """Found by the search: a step without a timeout is judged silent by the beat persisted
    last, and engines persisted beats at most every ``heartbeat_persist_throttle`` (10 s),
    longer than the chaos run's 3 s redispatch window: a step whose worker beat 1 s before was
    sent again. Beats are persisted at least every third of the window now."""
    sim = MemoryWorkerCluster()
    try:
        sim.start_remote(0, "remote")
        sim.tick(0)  # the step goes out under fence 1
        sim.take(0, GROUP, 1)  # a worker takes it and beats
        sim.hear_beats([0, 1, 2])
        sim.advance(2.0)
        sim.beat(0)  # still at it
        sim.hear_beats([0, 1, 2])
        sim.advance(1.0)
        sim.tick(1)  # 3 s after the first beat, 1 s after the last one
        sim.every_resend_was_forced()
        assert [c.fence for c in sim.net.sent[("remote-1", 1)]] == [1]
    finally:
        sim.teardown()


def test_a_step_executes_once_more_for_each_window_its_result_is_held() -> None:
    """The "seen once" triple execution (RELIABILITY.md) within the model: no message is lost;
    the engine that took each result holds it through an outage past the redispatch window,
    and a turn (whose own writes go through) sends the step again. The third execution's result
    is recorded; the two held ones, landed last, are dropped for their older fences."""
    sim = MemoryWorkerCluster()
    try:
        sim.start_remote(0, "remote")
        sim.tick(0)
        for _ in range(2):
            sim.take(0, GROUP, 1)
            sim.hear_beats([0, 1, 2])
            sim.finish(0, 0)
            sim.report_outage(2, "record_step_result", "before", 0)
            sim.deliver_answer(2, 0, False)  # engine 2's consumer holds it
            sim.advance(2.0)
            sim.advance(1.0)
            sim.tick(1)  # the step is silent for the window: sent again
        sim.take(0, GROUP, 1)
        sim.finish(0, 0)
        sim.deliver_answer(0, 0, False)
        sim.land_held(2)
        sim.tick(0)
        assert remote_executions[("remote-1", 1)] == 3
        copies = sim.net.sent[("remote-1", 1)]
        assert [(c.fence, c.state) for c in copies] == [
            (1, "dropped"),
            (2, "dropped"),
            (3, "landed"),
        ]
        assert set(sim.net.causes) == {"its answer was held by an engine through an outage"}
        sim.no_stale_fence_is_accepted()
    finally:
        sim.teardown()
