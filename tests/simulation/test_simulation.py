"""The deterministic simulation (see cluster.py): memory and SQLite here, PostgreSQL slow."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from .cluster import MemoryCluster, PostgresCluster, SqliteCluster

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
