"""Bulk-insert finished runs straight into a store's tables, for the scale workload.

Going through the engine would take minutes per 100,000 runs. The rows written here match what
the store writes for a completed two-step run of ``bench.steps`` (one run row, two completed
step rows; schema in ``src/runlane/stores/*/sql/migrations/0001_initial.sql``), created in the past so
that every new run sorts after them. PostgreSQL gets an ``ANALYZE`` afterwards, as autovacuum
would give a table that grew this way.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runlane.models import Run, RunStatus
from runlane.stores.base import Store

BASE = datetime(2020, 1, 1, tzinfo=UTC)

PG_RUNS = """
INSERT INTO runlane_runs (id, workflow, version, status, input, output, tags,
                          created_at, updated_at)
SELECT 'seed-' || lpad(i::text, 7, '0'), 'bench.steps', '1', 'completed', '2', '2', '{}',
       %(base)s + i * interval '1 millisecond', %(base)s + i * interval '1 millisecond'
FROM generate_series(1, %(n)s) AS i
"""
PG_STEPS = """
INSERT INTO runlane_steps (run_id, seq, name, kind, status, input, output, attempts,
                           started_at, finished_at)
SELECT 'seed-' || lpad(i::text, 7, '0'), s, 'bench.noop', 'step', 'completed',
       (s - 1)::text::json, s::text::json, 1,
       %(base)s + i * interval '1 millisecond', %(base)s + i * interval '1 millisecond'
FROM generate_series(1, %(n)s) AS i, generate_series(1, 2) AS s
"""
SQLITE_RUNS = """
INSERT INTO runs (id, workflow, version, status, input, output, tags, created_at, updated_at)
VALUES (?, 'bench.steps', '1', 'completed', '2', '2', '[]', ?, ?)
"""
SQLITE_STEPS = """
INSERT INTO steps (run_id, seq, name, kind, status, input, output, attempts,
                   started_at, finished_at)
VALUES (?, ?, 'bench.noop', 'step', 'completed', ?, ?, 1, ?, ?)
"""


async def finished_runs(db: str, store: Store, url: str, path: Path | None, n: int) -> None:
    if db == "pg":
        pg_rows(url, n)
    elif db == "sqlite":
        assert path is not None
        sqlite_rows(path, n)
    else:
        memory_rows(store, n)


def pg_rows(url: str, n: int) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute(PG_RUNS, {"base": BASE, "n": n})
        conn.execute(PG_STEPS, {"base": BASE, "n": n})
    # Vacuumed as a database of finished runs would be by now: otherwise autovacuum takes up
    # the 300,000 new rows while the seeded throughput is being measured, on one of two cores.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def _stamp(i: int) -> str:
    return (BASE + timedelta(milliseconds=i)).isoformat(timespec="microseconds")


def sqlite_rows(path: Path, n: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        ids = [(f"seed-{i:07d}", _stamp(i)) for i in range(1, n + 1)]
        conn.executemany(SQLITE_RUNS, ((rid, at, at) for rid, at in ids))
        conn.executemany(
            SQLITE_STEPS,
            ((rid, s, str(s - 1), str(s), at, at) for rid, at in ids for s in (1, 2)),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def memory_rows(store: Store, n: int) -> None:
    """For developing the harness against MemoryStore."""
    runs, steps = vars(store)["_runs"], vars(store)["_steps"]
    for i in range(1, n + 1):
        at = BASE + timedelta(milliseconds=i)
        run_id = f"seed-{i:07d}"
        runs[run_id] = Run(
            id=run_id,
            workflow="bench.steps",
            version="1",
            status=RunStatus.COMPLETED,
            input=2,
            output=2,
            error=None,
            tags=(),
            created_at=at,
            updated_at=at,
            wake_at=None,
            parent_id=None,
            namespace=None,
            priority=0,
        )
        steps[run_id] = {}
