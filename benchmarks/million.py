"""A million runs (issue 40): the claim path and the console's reads on a store that holds
1,000,000 finished runs and 10,000 active ones, PostgreSQL and SQLite.

    .venv/bin/python benchmarks/million.py [--quick] [--db pg,sqlite] [--explain]

The rows are written straight into the tables (``seed_pg``: one INSERT ... SELECT per table in
one transaction; ``seed_sqlite``: executemany in one transaction), never through
``engine.start``. Finished runs spread over 10 workflows (``bench.steps``, the one the claim
path runs, among them), 100 tags and 100 attribute values; the active runs are 1,000
singleton lanes of 10 (one holder, nine waiters), on a workflow no engine here serves.

Measured: the claim path's throughput (1,000 one-step runs started together) on the seeded
store against an empty one, alternating, medians; and each read ``READS`` names, ``--reads``
times: p50 / p99 ms, in a process set up as ``runlane serve`` is (its start-up frozen out of
the garbage collector's full passes), the lanes overview also without. ``--explain`` prints
each read's plan (EXPLAIN ANALYZE on PostgreSQL, EXPLAIN QUERY PLAN on SQLite) as the store
sends it. Figures go to
``benchmarks/results/million.json`` (a quick run: /tmp), rendered into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import workloads

from runlane.cli import settle_heap
from runlane.lanes import all_lanes
from runlane.models import RunCursor, RunQuery, RunStatus
from runlane.stores.base import Store

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "million.json"
BASE = datetime(2020, 1, 1, tzinfo=UTC)
STEP = timedelta(milliseconds=10)
KEYED = "scale.keyed"
FULL = {"finished": 1_000_000, "active": 10_000, "keys": 1000, "values": 100, "reps": 5}
QUICK = {"finished": 100_000, "active": 10_000, "keys": 1000, "values": 100, "reps": 1}


def workflow_of(i: int) -> str:
    return "bench.steps" if i % 10 == 0 else f"scale.wf-{i % 10}"


# ---------------------------------------------------------------- seeding PostgreSQL

PG_FINISHED = """
INSERT INTO runlane_runs (id, workflow, version, status, input, output, tags, created_at,
                          updated_at, settled_at, attributes)
SELECT 'done-' || lpad(i::text, 7, '0'),
       CASE WHEN i %% 10 = 0 THEN 'bench.steps' ELSE 'scale.wf-' || (i %% 10) END, '1',
       CASE WHEN i %% 20 = 7 THEN 'failed' ELSE 'completed' END, '1', '2',
       ARRAY['team:' || (i %% %(values)s)], %(base)s + i * %(step)s, %(base)s + i * %(step)s,
       %(base)s + i * %(step)s, jsonb_build_object('customer', 'c-' || (i %% %(values)s))
FROM generate_series(1, %(finished)s) AS i
"""
PG_STEPS = """
INSERT INTO runlane_steps (run_id, seq, name, kind, status, input, output, attempts,
                           started_at, finished_at)
SELECT 'done-' || lpad(i::text, 7, '0'), 1, 'bench.noop', 'step', 'completed', '1', '2', 1,
       %(base)s + i * %(step)s, %(base)s + i * %(step)s
FROM generate_series(1, %(finished)s) AS i
"""
# One holder per key (suspended, holding its slot), then nine waiters parked far ahead.
PG_ACTIVE = """
INSERT INTO runlane_runs (id, workflow, version, status, input, tags, created_at, updated_at,
                          wake_at, singleton_key, singleton_limit, holds_slot, attributes)
SELECT 'live-' || lpad(i::text, 7, '0'), %(keyed)s, '1',
       CASE WHEN i <= %(keys)s THEN 'suspended' ELSE 'blocked' END, '1',
       ARRAY['singleton:key-' || lpad((i %% %(keys)s)::text, 4, '0')],
       %(live)s + i * %(step)s, %(live)s + i * %(step)s,
       CASE WHEN i > %(keys)s THEN %(live)s + interval '100 years' END,
       length(%(keyed)s) || ':' || %(keyed)s || ':key-' || lpad((i %% %(keys)s)::text, 4, '0'),
       1, i <= %(keys)s, jsonb_build_object('customer', 'c-' || (i %% %(values)s))
FROM generate_series(1, %(active)s) AS i
"""
# The entries of their attributes (as the store writes a start's, and migration 0023 those of
# the runs it finds).
PG_ENTRIES = """
INSERT INTO runlane_attribute_runs (entry, created_at, run_id)
SELECT jsonb_hash_extended(jsonb_build_object(a.key, a.value), 0), r.created_at, r.id
FROM runlane_runs AS r, jsonb_each(r.attributes) AS a
"""


def seed_pg(url: str, size: dict[str, int]) -> float:
    import psycopg

    params = {**size, "base": BASE, "step": STEP, "keyed": KEYED, "live": live_base(size)}
    t0 = time.perf_counter()
    with psycopg.connect(url) as conn:  # one transaction
        conn.execute("SET runlane.attribute_entries = on")  # PG_ENTRIES writes them
        for sql in (PG_FINISHED, PG_STEPS, PG_ACTIVE, PG_ENTRIES):
            conn.execute(sql, params)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # as autovacuum would have left a table grown this way
    return time.perf_counter() - t0


def live_base(size: dict[str, int]) -> datetime:
    return BASE + STEP * (size["finished"] + 1)


# ---------------------------------------------------------------- seeding SQLite

SQLITE_RUN = """
INSERT INTO runs (id, workflow, version, status, input, output, tags, created_at, updated_at,
                  wake_at, singleton_key, singleton_limit, holds_slot, attributes)
VALUES (?, ?, '1', ?, '1', ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
SQLITE_STEP = """
INSERT INTO steps (run_id, seq, name, kind, status, input, output, attempts, started_at,
                   finished_at)
VALUES (?, 1, 'bench.noop', 'step', 'completed', '1', '2', 1, ?, ?)
"""
SQLITE_ATTRIBUTE = """
INSERT INTO attribute_runs (run_id, key, value, created_at) VALUES (?, 'customer', ?, ?)
"""


def stamp(at: datetime) -> str:
    return at.isoformat(timespec="microseconds")


def finished_rows(size: dict[str, int]) -> Iterator[tuple[Any, ...]]:
    for i in range(1, size["finished"] + 1):
        at, value = stamp(BASE + STEP * i), f"c-{i % size['values']}"
        status = "failed" if i % 20 == 7 else "completed"
        tags = json.dumps([f"team:{i % size['values']}"])
        attrs = json.dumps({"customer": value})
        yield (
            f"done-{i:07d}",
            workflow_of(i),
            status,
            "2",
            tags,
            at,
            at,
            None,
            None,
            None,
            0,
            attrs,
        )


def active_rows(size: dict[str, int]) -> Iterator[tuple[Any, ...]]:
    keys, live = size["keys"], live_base(size)
    for i in range(1, size["active"] + 1):
        at, key = stamp(live + STEP * i), f"key-{i % keys:04d}"
        holder = i <= keys
        wake = None if holder else stamp(live + timedelta(days=36500))
        status = "suspended" if holder else "blocked"
        lane = f"{len(KEYED)}:{KEYED}:{key}"
        row = (f"live-{i:07d}", KEYED, status, None, json.dumps([f"singleton:{key}"]), at, at)
        attrs = json.dumps({"customer": f"c-{i % size['values']}"})
        yield (*row, wake, lane, 1, int(holder), attrs)


def seed_sqlite(path: Path, size: dict[str, int]) -> float:
    t0 = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for rows in (finished_rows(size), active_rows(size)):
            runs = list(rows)
            conn.executemany(SQLITE_RUN, runs)
            # Each run's id, customer and created_at (SQLITE_RUN's first, last and sixth).
            values = ((run[0], json.loads(run[-1])["customer"], run[5]) for run in runs)
            conn.executemany(SQLITE_ATTRIBUTE, values)
        steps = ((f"done-{i:07d}", stamp(BASE + STEP * i)) for i in range(1, size["finished"] + 1))
        conn.executemany(SQLITE_STEP, ((rid, at, at) for rid, at in steps))
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()
    return time.perf_counter() - t0


# ---------------------------------------------------------------- the reads


def deep_cursor(size: dict[str, int]) -> RunCursor:
    """Where the page half-way down the finished runs ends."""
    i = size["finished"] // 2
    return RunCursor(BASE + STEP * i, f"done-{i:07d}")


def reads(size: dict[str, int]) -> dict[str, Callable[[Store], Awaitable[Any]]]:
    """The console's and the API's reads, by name."""
    deep = deep_cursor(size)
    done = RunStatus.COMPLETED
    one = {"customer": "c-42"}
    now = datetime.now(UTC)
    found: dict[str, Callable[[Store], Awaitable[Any]]] = {}
    for name, query in {
        "status": RunQuery(status=done),
        "workflow": RunQuery(workflow="scale.wf-3"),
        "tag": RunQuery(tag="team:42"),
        "attribute": RunQuery(attributes=one),
    }.items():
        found[f"list_runs by {name}, first page"] = lambda s, q=query: s.page_runs(q, 50)
        deeper = RunQuery(**{**vars(query), "after": deep})
        found[f"list_runs by {name}, deep cursor"] = lambda s, q=deeper: s.page_runs(q, 50)
    found["status counts, every run"] = lambda s: s.count_runs(RunQuery())
    found["status counts, one workflow"] = lambda s: s.count_runs(RunQuery(workflow="scale.wf-3"))
    found["active counts (console)"] = lambda s: s.active_run_counts()
    found["lanes, all (all_lanes)"] = lambda s: all_lanes(s, now)
    found["lanes, one key, every waiter"] = lambda s: all_lanes(s, now, "key-0007")
    return found


async def time_reads(store: Store, size: dict[str, int], times: int) -> dict[str, Any]:
    """Each read, ``times`` times, in a process set up as ``runlane serve`` sets up its own:
    what start-up made frozen out of the collector's full passes (``settle_heap``). The lanes
    overview is then timed once more with nothing frozen, as an embedding application that
    does not freeze its start-up would see it."""
    found = reads(size)
    settle_heap()
    try:
        figures = {name: await timed(store, read, times) for name, read in found.items()}
    finally:
        gc.unfreeze()
    lanes = found["lanes, all (all_lanes)"]
    figures["lanes, all, start-up not frozen"] = await timed(store, lanes, times)
    return figures


async def timed(
    store: Store, read: Callable[[Store], Awaitable[Any]], times: int
) -> dict[str, Any]:
    await read(store)  # prepared, and the pages it reads cached
    samples = []
    for _ in range(times):
        t0 = time.perf_counter()
        await read(store)
        samples.append((time.perf_counter() - t0) * 1000)
    return {
        "p50_ms": round(common.median(samples), 2),
        "p99_ms": round(common.pct(samples, 0.99), 2),
    }


# ---------------------------------------------------------------- plans


@contextmanager
def captured_pg() -> Iterator[list[tuple[str, Any]]]:
    """The statements the PostgreSQL store sends meanwhile, with their parameters."""
    import psycopg

    from runlane.stores.postgres import direct

    seen: list[tuple[str, Any]] = []
    execute, run = psycopg.AsyncConnection.execute, direct.Direct.run

    async def on_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        seen.append((str(query), params))
        return await execute(self, query, params, **kw)

    async def on_run(self: Any, conn: Any, name: str, params: Any) -> Any:
        seen.append((self._statements[name], params))
        return await run(self, conn, name, params)

    psycopg.AsyncConnection.execute = on_execute  # type: ignore[method-assign]
    direct.Direct.run = on_run  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        psycopg.AsyncConnection.execute = execute  # type: ignore[method-assign]
        direct.Direct.run = run  # type: ignore[method-assign]


def explain_pg(url: str, sql: str, params: Any) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", params).fetchall()
    return "\n".join(str(r[0]) for r in rows)


async def explain(target: workloads.Target, size: dict[str, int]) -> dict[str, str]:
    plans = {}
    store = target.store()
    await store.open()
    try:
        for name, read in reads(size).items():
            if target.db == "pg":
                with captured_pg() as seen:
                    await read(store)
                text = [explain_pg(target.url, sql, params) for sql, params in seen]
            else:
                text = await explain_sqlite(store, read)
            plans[name] = "\n--\n".join(text)
    finally:
        await store.close()
    return plans


async def explain_sqlite(store: Store, read: Callable[[Store], Awaitable[Any]]) -> list[str]:
    """EXPLAIN QUERY PLAN of each statement ``read`` runs, as SQLite expanded it."""
    seen: list[str] = []
    conn = vars(vars(store)["_worker"])["_conn"]  # the store's one connection (its worker's)
    conn.set_trace_callback(seen.append)
    try:
        await read(store)
    finally:
        conn.set_trace_callback(None)
    out, plain = [], sqlite3.connect(getattr(store, "path", ""))
    for sql in seen:
        if sql.lstrip().upper().startswith(("SELECT", "WITH")):
            rows = plain.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
            out.append(sql.strip() + "\n" + "\n".join(f"  {r[-1]}" for r in rows))
    plain.close()
    return out


# ---------------------------------------------------------------- the claim path


async def claim_throughput(target: workloads.Target, n: int) -> dict[str, Any]:
    """``n`` one-step runs started together, each claimed and run: workflows/s."""
    async with target.engine(workloads.steps_wf) as engine:
        await workloads.warm_up(engine, 1)
        return await workloads.timed_batch(engine, n, 1)


def pg_target(tmp: Path, name: str) -> workloads.Target:
    url = f"{common.PG_ADMIN.rsplit('/', 1)[0]}/{name}"
    return workloads.Target("pg", tmp, url=url)


def recreate_pg(name: str) -> None:
    drop_pg(name)
    import psycopg

    with psycopg.connect(common.PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")


def drop_pg(name: str) -> None:
    import psycopg

    with psycopg.connect(common.PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def prepared(db: str, tmp: Path, size: dict[str, int] | None) -> workloads.Target:
    """A store with its schema, seeded with ``size`` (None: left empty)."""
    if db == "pg":
        name = "million_seeded" if size else "million_empty"
        recreate_pg(name)
        target = pg_target(tmp, name)
    else:
        target = workloads.Target("sqlite", tmp, path=common.fresh_sqlite(tmp))
    store = target.store()
    await store.open()  # migrates
    await store.close()
    if size:
        seconds = seed_pg(target.url, size) if db == "pg" else seed_sqlite(target.path, size)  # type: ignore[arg-type]
        print(f"    seeded {db} in {seconds:.1f}s", flush=True)
    return target


async def one_db(
    db: str, size: dict[str, int], args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    empty, seeded = await prepared(db, tmp, None), await prepared(db, tmp, size)
    runs: dict[str, list[float]] = {"empty": [], "seeded": []}
    for rep in range(size["reps"]):
        order = [("empty", empty), ("seeded", seeded)]
        for label, target in order if rep % 2 == 0 else reversed(order):
            figures = await claim_throughput(target, args.n)
            runs[label].append(figures["workflows_per_s"])
            print(f"    {db} {label}: {figures['workflows_per_s']} wf/s", flush=True)
    store = seeded.store()
    await store.open()
    try:
        timed = await time_reads(store, size, args.reads)
    finally:
        await store.close()
    result = {
        "claim_empty_wf_s": runs["empty"],
        "claim_seeded_wf_s": runs["seeded"],
        "claim_ratio": round(common.median(runs["seeded"]) / common.median(runs["empty"]), 3),
        "reads": timed,
    }
    if args.explain:
        result["plans"] = await explain(seeded, size)
    if db == "pg":
        for name in ("million_empty", "million_seeded"):
            drop_pg(name)
    return result


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", default=os.environ.get("QUICK") == "1")
    p.add_argument("--db", default="pg,sqlite")
    p.add_argument("--finished", type=int, default=0, help="finished runs (default 1,000,000)")
    p.add_argument("--n", type=int, default=1000, help="runs of the claim-path batch")
    p.add_argument("--reads", type=int, default=100, help="times each read is timed")
    p.add_argument("--explain", action="store_true", default=True)
    p.add_argument("--out", default="")
    return p.parse_args()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    size = dict(QUICK if args.quick else FULL)
    if args.finished:
        size["finished"] = args.finished
    tmp = Path(tempfile.mkdtemp(prefix="runlane-million-"))
    facts = {"size": size, "load_start": common.load_avg(), "machine": common.machine()}
    result: dict[str, Any] = {"facts": facts}
    try:
        for db in args.db.split(","):
            print(f"--> {db}", flush=True)
            result[db] = await one_db(db, size, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a seeded SQLite file is about 1 GB
    facts["load_end"] = common.load_avg()
    return result


def main() -> None:
    args = parse_args()
    result = asyncio.run(run(args))
    out = Path(args.out or ("/tmp/million-quick.json" if args.quick else OUT))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    for db in args.db.split(","):
        for name, figures in result[db]["reads"].items():
            print(f"{db:6} {name:45} p50 {figures['p50_ms']:8.2f}  p99 {figures['p99_ms']:8.2f} ms")
        print(f"{db:6} claim path seeded/empty: {result[db]['claim_ratio']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
