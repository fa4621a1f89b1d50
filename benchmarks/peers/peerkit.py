"""Helpers shared by the peer drivers (each runs in its peer's own venv: stdlib and psycopg only).

A driver prints one ``[phase] {...}`` line per phase and, with ``--json FILE``, appends one JSON
line ``{"args": {...}, "db": ..., "<phase>": {...figures}, ...}`` that ``benchmarks/run.py`` reads.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_USER = os.environ.get("BENCH_PG_USER", os.environ.get("PGUSER", "postgres"))


def pg_dsn(dbname: str) -> str:
    return f"host={PG_HOST} port=5432 user={PG_USER} dbname={dbname}"


def recreate_database(name: str, admin_db: str = "postgres") -> None:
    """Drop ``name`` (closing its sessions) and create it empty."""
    import psycopg

    with psycopg.connect(pg_dsn(admin_db), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")


def drop_database(name: str, admin_db: str = "postgres") -> None:
    import psycopg

    with psycopg.connect(pg_dsn(admin_db), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def xact_counts(name: str, admin_db: str = "postgres") -> tuple[int, int]:
    """``pg_stat_database`` (xact_commit, xact_rollback) of database ``name``."""
    import psycopg

    with psycopg.connect(pg_dsn(admin_db), autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def start_watchdog(seconds: float) -> None:
    """Exit the whole process (code 3) if the driver is still running after ``seconds``."""

    def guard() -> None:
        time.sleep(seconds)
        print(f"WATCHDOG: still running after {seconds:.0f}s, exiting", flush=True)
        os._exit(3)

    threading.Thread(target=guard, daemon=True, name="watchdog").start()


def backend_jiffies(database: str) -> dict[int, int]:
    """CPU jiffies (user + system) of each PostgreSQL backend serving ``database`` on this
    machine, by pid: read from ``/proc``, where a backend's title names its database."""
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().decode(errors="replace").split()
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        # "postgres: 15/main: <user> <database> <client> <state>"
        if len(title) >= 4 and title[0] == "postgres:" and title[3] == database:
            found[int(entry)] = int(fields[11]) + int(fields[12])
    return found


class CpuMark:
    """This process's CPU seconds, the machine's busy/total jiffies and (given the database)
    the CPU jiffies of the PostgreSQL backends serving it, at one instant."""

    def __init__(self, database: str | None = None) -> None:
        t = os.times()
        self.process = t.user + t.system
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        self.total = sum(fields)
        self.busy = self.total - fields[3] - fields[4]  # minus idle and iowait
        self.database = database
        self.backends = backend_jiffies(database) if database else {}

    def since(self, start: CpuMark, per: int) -> dict[str, float]:
        """CPU figures from ``start`` to this mark, per unit of work (``per`` workflows)."""
        hz = os.sysconf("SC_CLK_TCK")
        busy = self.busy - start.busy
        figures = {
            "py_cpu_ms_per_wf": round((self.process - start.process) * 1000 / per, 3),
            "machine_busy_pct": round(100.0 * busy / max(1, self.total - start.total), 1),
            "machine_cpu_ms_per_wf": round(busy * 1000 / hz / per, 3),
        }
        if self.database:
            # A backend that started since counts from zero; one that ended is not seen.
            server = sum(j - start.backends.get(pid, 0) for pid, j in self.backends.items())
            figures["server_cpu_ms_per_wf"] = round(server * 1000 / hz / per, 3)
        return figures


def nearest_rank(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (the rule runlane's side uses too)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency_figures(samples_ms: Sequence[float], steps: int) -> dict[str, float]:
    mid = statistics.median(samples_ms)
    return {
        "median_ms": round(mid, 2),
        "p99_ms": round(nearest_rank(samples_ms, 0.99), 2),
        "min_ms": round(min(samples_ms), 2),
        "max_ms": round(max(samples_ms), 2),
        "per_step_ms_median": round(mid / steps, 3),
    }


def say(phase: str, figures: dict[str, Any]) -> None:
    shown = {k: v for k, v in figures.items() if not k.startswith("_") and k != "pgss_top"}
    print(f"[{phase}] {json.dumps(shown)}", flush=True)


def append_json(path: str, line: dict[str, Any]) -> None:
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line, default=str) + "\n")
