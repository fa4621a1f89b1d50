"""DBOS Transact's side of the compared workloads (run in ``.peers-venv``; read against DBOS 3.4).

    .peers-venv/bin/python benchmarks/peers/dbos_driver.py --db pg --phases throughput,latency
    .peers-venv/bin/python benchmarks/peers/dbos_driver.py --db sqlite --sqlite-wal --json out.jsonl

Phases, the same work as runlane's ``benchmarks/workloads.py``:

- ``throughput``: ``--n`` workflows of ``--steps`` trivial steps, all started with
  ``DBOS.start_workflow``, then every handle's result; workflows/s, Python CPU per workflow, and
  the store's cost per workflow: client statements and commits (SQLAlchemy engine events on the
  system database), and on PostgreSQL ``pg_stat_statements`` calls when the server preloads it.
  When throughput runs alone, the ``pg_stat_database.xact_commit`` delta per workflow too (idle
  background commits measured first and subtracted).
- ``latency``: one workflow of ``--seq-steps`` sequential steps called directly, ``--seq-runs``
  times: median / p99 / min / max ms.
- ``queue``: ``--keys`` x ``--per-key`` workflows through a partitioned queue
  (``partition_concurrency=1``), each one step sleeping ``--queue-step-ms``; the bodies record
  when they ran, so overlaps within a key and order violations are counted here.

The PostgreSQL system database is ``dbos_bench`` (created afresh, dropped at the end).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sqlite3
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerkit

SYS_DB = os.environ.get("BENCH_DBOS_DB", "dbos_bench")  # another name: benches side by side


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=["pg", "sqlite"], default="pg")
    p.add_argument("--phases", default="throughput,latency,queue")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seq-steps", type=int, default=10)
    p.add_argument("--seq-runs", type=int, default=50)
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--per-key", type=int, default=20)
    p.add_argument("--queue-poll", type=float, default=1.0, help="queue polling_interval_sec")
    p.add_argument("--queue-step-ms", type=float, default=2.0)
    p.add_argument("--sqlite-wal", action="store_true", help="put the SQLite file in WAL mode")
    p.add_argument("--sqlite-path", default="/var/tmp/dbos-bench/dbos_sys.sqlite")
    p.add_argument("--stats-settle", type=float, default=11.0, help="idle s before xact baseline")
    p.add_argument("--watchdog", type=float, default=170.0)
    p.add_argument("--json", default="")
    return p.parse_args()


ARGS = parse_args()
peerkit.start_watchdog(ARGS.watchdog)

from dbos import DBOS, DBOSConfig, SetEnqueueOptions  # noqa: E402
from sqlalchemy import event  # noqa: E402

# ---------------------------------------------------------------- the work


@DBOS.step()
def add_one(x: int) -> int:
    return x + 1


@DBOS.workflow()
def chain(steps: int) -> int:
    x = 0
    for _ in range(steps):
        x = add_one(x)
    return x


class KeyLog:
    """Who ran inside a keyed workflow, and when; filled by the bodies themselves."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.spans: list[tuple[str, float, float, int]] = []

    def enter(self, key: str) -> float:
        with self.lock:
            self.inside[key] = self.inside.get(key, 0) + 1
            self.peak[key] = max(self.peak.get(key, 0), self.inside[key])
        return time.monotonic()

    def leave(self, key: str, began: float, seq: int) -> None:
        with self.lock:
            self.inside[key] -= 1
            self.spans.append((key, began, time.monotonic(), seq))

    def done(self) -> int:
        with self.lock:
            return len(self.spans)


KEYS = KeyLog()


@DBOS.step()
def nap(ms: float) -> None:
    time.sleep(ms / 1000)


@DBOS.workflow()
def keyed(key: str, seq: int) -> int:
    began = KEYS.enter(key)
    nap(ARGS.queue_step_ms)
    KEYS.leave(key, began, seq)
    return seq


# ---------------------------------------------------------------- store cost counters


class StoreCounts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, int] = {}

    def bump(self, name: str) -> None:
        with self.lock:
            self.values[name] = self.values.get(name, 0) + 1

    def take(self) -> dict[str, int]:
        with self.lock:
            taken, self.values = self.values, {}
        return taken


COUNTS = StoreCounts()


def watch_engine(engine: Any) -> None:
    """Count statements, commits, rollbacks and pool checkouts on DBOS's system database."""
    event.listen(engine, "before_cursor_execute", lambda *a: COUNTS.bump("stmts"))
    event.listen(engine, "commit", lambda *a: COUNTS.bump("commits"))
    event.listen(engine, "rollback", lambda *a: COUNTS.bump("rollbacks"))
    event.listen(engine, "checkout", lambda *a: COUNTS.bump("checkouts"))


def pgss(action: str) -> Any:
    """Reset or read pg_stat_statements for the system database (skipped when not preloaded)."""
    import psycopg

    try:
        with psycopg.connect(peerkit.pg_dsn("postgres"), autocommit=True) as conn:
            if action == "reset":
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                conn.execute("SELECT pg_stat_statements_reset()")
                return None
            rows = conn.execute(
                "SELECT s.calls, left(regexp_replace(s.query, '\\s+', ' ', 'g'), 110)"
                " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                " WHERE d.datname = %s AND s.toplevel ORDER BY s.calls DESC",
                (SYS_DB,),
            ).fetchall()
    except Exception as exc:
        print(f"[note] pg_stat_statements unavailable: {type(exc).__name__}", flush=True)
        return None
    total = sum(int(r[0]) for r in rows)
    commits = sum(int(r[0]) for r in rows if r[1].strip().upper() == "COMMIT")
    return total, commits, [(int(r[0]), r[1]) for r in rows[:20]]


# ---------------------------------------------------------------- phases


def throughput() -> dict[str, Any]:
    n, steps = ARGS.n, ARGS.steps
    for handle in [DBOS.start_workflow(chain, steps) for _ in range(20)]:  # warm-up
        handle.get_result()
    figures: dict[str, Any] = {"n": n, "steps": steps}
    if ARGS.db == "pg":
        time.sleep(ARGS.stats_settle)  # idle backends flush their statistics
        idle0, t_idle = peerkit.xact_counts(SYS_DB), time.monotonic()
        time.sleep(2.0)
        idle1 = peerkit.xact_counts(SYS_DB)
        figures["bg_xact_per_s_idle"] = round(
            (idle1[0] - idle0[0]) / (time.monotonic() - t_idle), 2
        )
        pgss("reset")
        figures["_x0"] = peerkit.xact_counts(SYS_DB)
    COUNTS.take()
    database = SYS_DB if ARGS.db == "pg" else None
    cpu0, t0 = peerkit.CpuMark(database), time.perf_counter()
    handles = [DBOS.start_workflow(chain, steps) for _ in range(n)]
    started = time.perf_counter()
    for handle in handles:
        if handle.get_result() != steps:
            raise RuntimeError("a workflow returned a wrong result")
    elapsed = time.perf_counter() - t0
    cpu = peerkit.CpuMark(database).since(cpu0, n)
    counts = COUNTS.take()
    figures.update(
        {
            "seconds": round(elapsed, 3),
            "start_loop_seconds": round(started - t0, 3),
            "workflows_per_s": round(n / elapsed, 1),
            "steps_per_s": round(n * steps / elapsed, 1),
            "client_stmts_per_wf": round(counts.get("stmts", 0) / n, 2),
            "client_commits_per_wf": round(counts.get("commits", 0) / n, 2),
            "client_rollbacks_per_wf": round(counts.get("rollbacks", 0) / n, 2),
            "pool_checkouts_per_wf": round(counts.get("checkouts", 0) / n, 2),
            **cpu,
        }
    )
    if ARGS.db == "pg":
        read = pgss("read")
        if read is not None:
            total, commits, top = read
            figures["pgss_toplevel_calls_per_wf"] = round(total / n, 2)
            figures["pgss_commit_calls_per_wf"] = round(commits / n, 2)
            figures["pgss_top"] = top
    peerkit.say("throughput", figures)
    return figures


def latency() -> dict[str, Any]:
    steps, runs = ARGS.seq_steps, ARGS.seq_runs
    for _ in range(5):
        chain(steps)
    COUNTS.take()
    cpu0 = peerkit.CpuMark()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        if chain(steps) != steps:
            raise RuntimeError("a workflow returned a wrong result")
        samples.append((time.perf_counter() - t0) * 1000)
    cpu = peerkit.CpuMark().since(cpu0, runs)
    counts = COUNTS.take()
    figures = {
        "steps": steps,
        "runs": runs,
        **peerkit.latency_figures(samples, steps),
        "client_commits_per_wf": round(counts.get("commits", 0) / runs, 2),
        "client_stmts_per_wf": round(counts.get("stmts", 0) / runs, 2),
        "pool_checkouts_per_wf": round(counts.get("checkouts", 0) / runs, 2),
        **cpu,
    }
    peerkit.say("latency", figures)
    return figures


def queue() -> dict[str, Any]:
    lane = DBOS.register_queue(
        "bench_partitioned",
        partition_concurrency=1,
        polling_interval_sec=ARGS.queue_poll,
        on_conflict="always_update",
    )
    keys = [f"key-{i:03d}" for i in range(ARGS.keys)]
    total = len(keys) * ARGS.per_key
    cpu0, t0 = peerkit.CpuMark(), time.perf_counter()
    handles = []
    for seq in range(ARGS.per_key):
        for key in keys:
            with SetEnqueueOptions(queue_partition_key=key):
                handles.append(lane.enqueue(keyed, key, seq))
    enqueued = time.perf_counter()
    deadline = time.monotonic() + max(10.0, ARGS.watchdog - 20)
    while KEYS.done() < total and time.monotonic() < deadline:
        time.sleep(0.01)  # the bodies report in-process: no polling of 1,000 handles
    elapsed = time.perf_counter() - t0
    cpu = peerkit.CpuMark().since(cpu0, max(1, KEYS.done()))
    for handle in handles[:: max(1, total // 20)]:
        handle.get_result()
    overlaps = violations = 0
    by_key: dict[str, list[tuple[float, float, int]]] = {}
    for key, began, ended, seq in KEYS.spans:
        by_key.setdefault(key, []).append((began, ended, seq))
    for spans in by_key.values():
        spans.sort()
        for (_, end1, seq1), (start2, _, seq2) in itertools.pairwise(spans):
            overlaps += start2 < end1
            violations += seq2 < seq1
    figures = {
        "keys": ARGS.keys,
        "per_key": ARGS.per_key,
        "completed": KEYS.done(),
        "polling_interval_sec": ARGS.queue_poll,
        "step_sleep_ms": ARGS.queue_step_ms,
        "enqueue_seconds": round(enqueued - t0, 3),
        "total_seconds": round(elapsed, 3),
        "workflows_per_s": round(KEYS.done() / elapsed, 1),
        "max_inflight_any_key": max(KEYS.peak.values()) if KEYS.peak else None,
        "overlapping_pairs": overlaps,
        "fifo_violations_within_key": violations,
        **cpu,
    }
    peerkit.say("queue", figures)
    return figures


# ---------------------------------------------------------------- main


def system_database() -> str:
    if ARGS.db == "pg":
        peerkit.recreate_database(SYS_DB)
        return f"postgresql+psycopg://{peerkit.PG_USER}@{peerkit.PG_HOST}:5432/{SYS_DB}"
    folder = os.path.dirname(ARGS.sqlite_path)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    if ARGS.sqlite_wal:
        conn = sqlite3.connect(ARGS.sqlite_path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    return f"sqlite:///{ARGS.sqlite_path}"


def main() -> None:
    try:
        dbos_version = version("dbos")
    except PackageNotFoundError:
        dbos_version = None
    results: dict[str, Any] = {"db": ARGS.db, "dbos_version": dbos_version}
    config: DBOSConfig = {
        "name": "runlane-peer-dbos",
        "system_database_url": system_database(),
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    from dbos._dbos import _get_dbos_instance  # private: only to count the store's statements

    watch_engine(_get_dbos_instance()._sys_db.engine)
    if ARGS.db == "sqlite":
        with sqlite3.connect(ARGS.sqlite_path) as conn:
            results["sqlite_journal_mode"] = conn.execute("PRAGMA journal_mode").fetchone()[0]
    phases = ARGS.phases.split(",")
    runners = {"throughput": throughput, "latency": latency, "queue": queue}
    for phase in phases:
        results[phase] = runners[phase]()
    destroyed = time.perf_counter()
    DBOS.destroy()
    tp = results.get("throughput")
    if ARGS.db == "pg" and tp is not None and phases == ["throughput"]:
        # Commits per workflow only when throughput ran alone: nothing else in the delta.
        time.sleep(0.5)
        x1, x0 = peerkit.xact_counts(SYS_DB), tp["_x0"]
        elapsed = tp["seconds"] + time.perf_counter() - destroyed
        background = tp["bg_xact_per_s_idle"] * elapsed
        tp["xact_commit_per_wf"] = round((x1[0] - x0[0] - background) / ARGS.n, 2)
        tp["xact_commit_per_wf_raw"] = round((x1[0] - x0[0]) / ARGS.n, 2)
        tp["xact_rollback_per_wf"] = round((x1[1] - x0[1]) / ARGS.n, 2)
        print(f"[throughput-store] xact_commit per workflow {tp['xact_commit_per_wf']}", flush=True)
        for calls, text in tp.get("pgss_top", []):
            print(f"  {calls:6d}  {text}", flush=True)
    if tp is not None:
        tp.pop("_x0", None)
    if ARGS.db == "pg":
        peerkit.drop_database(SYS_DB)
    peerkit.append_json(ARGS.json, {"args": vars(ARGS), **results})
    print("done", flush=True)
    os._exit(0)  # DBOS leaves non-daemon threads behind


if __name__ == "__main__":
    main()
