"""Shared helpers for the benchmark harness: throw-away stores, statistics, machine facts.

Every workload gets a fresh target: a new SQLite file in a temp directory, or the PostgreSQL
database ``runlane_bench`` dropped and created again. ``drop_pg`` removes it at the end.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")
PG_ADMIN = f"postgresql://{PG_USER}@{PG_HOST}:5432/postgres"
PG_DB = os.environ.get("BENCH_PG_DB", "runlane_bench")  # another name: benches side by side
PG_URL = f"postgresql://{PG_USER}@{PG_HOST}:5432/{PG_DB}"
PG_DB_MISSING = "pg_db_missing"


# ---------------------------------------------------------------- targets


def fresh_pg() -> str:
    """Drop and create ``runlane_bench``; return its URL."""
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    return PG_URL


def drop_pg() -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")


def fresh_sqlite(tmp: Path) -> Path:
    """A new SQLite file under ``tmp``, already in WAL mode (the store may set it too)."""
    path = Path(tempfile.mkdtemp(dir=tmp)) / "runlane.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    return path


def sqlite_mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def pg_xact_commits() -> int:
    """``pg_stat_database.xact_commit`` of the bench database, read from the admin database."""
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (PG_DB,)
        ).fetchone()
    return int(row[0]) if row else 0


def pg_settled_commits(settle: float = 0.5) -> int:
    """The commit count once backends that just exited have flushed their statistics."""
    time.sleep(settle)
    previous = pg_xact_commits()
    for _ in range(40):
        time.sleep(0.25)
        current = pg_xact_commits()
        if current == previous:
            return current
        previous = current
    return previous


def pg_row_writes() -> int:
    """Rows inserted, updated or deleted in the bench database's tables (pg_stat_user_tables)."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables"
        ).fetchone()
    return int(row[0]) if row else 0


def pg_version() -> str:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def pg_stat_statements_ready() -> bool:
    """pg_stat_statements counts only when the server preloads it."""
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        row = conn.execute("SHOW shared_preload_libraries").fetchone()
    return bool(row) and "pg_stat_statements" in str(row[0])


# ---------------------------------------------------------------- figures


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, the same rule as the peer's script."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def rss_mb() -> float:
    """Resident set size of this process (VmRSS) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def machine() -> dict[str, Any]:
    with open("/proc/meminfo") as f:
        total_kb = int(f.readline().split()[1])
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(total_kb / 1024 / 1024, 1),
        "sqlite": sqlite3.sqlite_version,
    }
