"""Run attributes on 100,000 runs: a filtered page and a filtered count, and the plans behind them.

    .venv/bin/python benchmarks/attributes.py [--db pg,sqlite] [--runs 100000] [--reads 200]

Seeds a fresh store (PostgreSQL's ``$BENCH_PG_DB``, default ``runlane_bench``, created again;
a new SQLite file) with runs created through the store's own ``create_runs``, as starts write
them, one a second, each with four attributes: ``customer`` (100 values: 1,000 runs each),
``tier`` (0, 1 or 2: a third of the runs each), ``region`` (5 values) and ``vip`` (every 10th
run). Ten runs more carry a customer of their own (a rare value). Then, for each filter below,
``page_runs`` (the first page of 50, newest first: what ``list_runs``, the HTTP API and the
console read) and ``count_runs`` (the console's counts by status) are timed ``--reads`` times,
each read waited for before the next: p50 and p99 in milliseconds. The filters: one customer
(1% of the runs), a customer and a tier (0.3%), the rare customer (10 runs), a value no run has,
and one tier (33%: the worst case for an index read first). Last, each store's plan of the first
filter's page and count: PostgreSQL's ``EXPLAIN (ANALYZE, BUFFERS)`` of the generic plan (the
store's sessions force generic plans) as the starts left the table and after a ``VACUUM`` (as
autovacuum leaves it), SQLite's ``EXPLAIN QUERY PLAN``. One JSON line
per store (and state) and filter, then the plans.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common

from runlane.models import RunQuery, RunSpec
from runlane.stores.base import Store
from runlane.stores.postgres import PostgresStore
from runlane.stores.postgres.db import SQL as PG_SQL
from runlane.stores.postgres.rows import filtered, query_params, utc_conninfo
from runlane.stores.sqlite import SqliteStore
from runlane.stores.sqlite.reads import _query_selection as sqlite_selection

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 1000
PAGE = 50

FILTERS: dict[str, dict[str, Any]] = {
    "one customer (1%)": {"customer": "customer-42"},
    "a customer and a tier (0.3%)": {"customer": "customer-42", "tier": 1},
    "a rare customer (10 runs)": {"customer": "rare"},
    "a value no run has": {"customer": "nobody"},
    "one tier (33%)": {"tier": 1},
}


def attributes_of(i: int) -> dict[str, Any]:
    return {
        "customer": f"customer-{i % 100}",
        "tier": i % 3,
        "region": ["eu", "us", "ap", "sa", "af"][i % 5],
        "vip": i % 10 == 0,
    }


def specs(n: int) -> list[RunSpec]:
    made = [
        RunSpec(f"run-{i:06d}", "bench.steps", "1", 2, T0 + timedelta(seconds=i), attributes=a)
        for i, a in ((i, attributes_of(i)) for i in range(n))
    ]
    rare = [
        RunSpec(
            f"rare-{i}",
            "bench.steps",
            "1",
            2,
            T0 + timedelta(seconds=i * 9973),
            attributes={"customer": "rare"},
        )
        for i in range(10)
    ]
    return made + rare


async def seed(store: Store, n: int) -> float:
    """Create the runs in batches of ``BATCH``; seconds it took."""
    all_specs = specs(n)
    began = time.perf_counter()
    for i in range(0, len(all_specs), BATCH):
        chunk = all_specs[i : i + BATCH]
        await store.create_runs(chunk, chunk[-1].created_at)
    return time.perf_counter() - began


async def timed(read: Callable[[], Awaitable[Any]], reads: int) -> dict[str, float]:
    took = []
    for _ in range(reads):
        began = time.perf_counter()
        await read()
        took.append((time.perf_counter() - began) * 1000)
    return {"p50_ms": round(common.median(took), 3), "p99_ms": round(common.pct(took, 0.99), 3)}


async def measure(store: Store, db: str, reads: int) -> list[dict[str, Any]]:
    lines = []
    for name, wanted in FILTERS.items():
        query = RunQuery(attributes=wanted)
        page = await store.page_runs(query, PAGE)
        counts = await store.count_runs(query)
        line = {
            "db": db,
            "filter": name,
            "matching": sum(counts.values()),
            "page_rows": len(page),
            "page": await timed(functools.partial(store.page_runs, query, PAGE), reads),
            "count": await timed(functools.partial(store.count_runs, query), reads),
        }
        print(json.dumps(line), flush=True)
        lines.append(line)
    return lines


# ---------------------------------------------------------------- plans


def pg_plans(url: str) -> dict[str, str]:
    import psycopg
    import psycopg.sql

    query = RunQuery(attributes=FILTERS["one customer (1%)"])
    plans = {}
    with psycopg.connect(utc_conninfo(url), autocommit=True) as conn:
        for name, statement, cursor in (
            ("page", "page_runs_by_attributes", True),
            ("count", "count_runs_by_attributes", False),
        ):
            params = {**query_params(query, cursor=cursor), "limit": PAGE}
            sql, values = _numbered(filtered(PG_SQL[statement], params), params)
            conn.execute(f"PREPARE bench_{name} AS {sql}")
            arguments = psycopg.sql.SQL(", ").join(psycopg.sql.Literal(v) for v in values)
            explain = psycopg.sql.SQL("EXPLAIN (ANALYZE, BUFFERS) EXECUTE {}({})").format(
                psycopg.sql.Identifier(f"bench_{name}"), arguments
            )
            rows = conn.execute(explain).fetchall()
            plans[name] = "\n".join(row[0] for row in rows)
    return plans


def _numbered(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """psycopg's ``%(name)s`` placeholders as ``$n``, for a PREPARE, and their values."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return re.sub(r"%\((\w+)\)s", number, sql), [params[n] for n in names]


def sqlite_plans(path: Path) -> dict[str, str]:
    import sqlite3

    query = RunQuery(attributes=FILTERS["one customer (1%)"])
    plans = {}
    with sqlite3.connect(path) as conn:
        for name, sql, cursor in (
            ("page", "SELECT runs.* {source} {newest} LIMIT 50", True),
            ("count", "SELECT status, count(*) {source} GROUP BY status", False),
        ):
            source, params, newest = sqlite_selection(query, cursor=cursor)
            statement = sql.format(source=source, newest=newest)
            rows = conn.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
            plans[name] = "\n".join(f"{row[0]:>3} {row[1]:>3} {row[3]}" for row in rows)
    return plans


# ---------------------------------------------------------------- stores


async def on_pg(runs: int, reads: int) -> None:
    url = common.fresh_pg()
    store = PostgresStore(url)
    await store.open()
    try:
        print(
            json.dumps(
                {"db": "pg", "runs": runs + 10, "seed_seconds": round(await seed(store, runs), 1)}
            )
        )
        # As the starts left it (analyzed, as autovacuum would have by now), then vacuumed:
        # the index has no pending list (fastupdate off), so the two should not differ.
        pg_maintain(url, "ANALYZE runlane_runs")
        await measure(store, "pg, as the starts left it", reads)
        for name, plan in pg_plans(url).items():
            print(f"--- PostgreSQL, {name} of one customer, as the starts left it:\n{plan}")
        pg_maintain(url, "VACUUM ANALYZE runlane_runs")
        await measure(store, "pg, after VACUUM", reads)
    finally:
        await store.close()
    for name, plan in pg_plans(url).items():
        print(f"--- PostgreSQL, {name} of one customer, after VACUUM:\n{plan}")
    common.drop_pg()


def pg_maintain(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


async def on_sqlite(runs: int, reads: int) -> None:
    with tempfile.TemporaryDirectory(prefix="runlane-bench-") as tmp:
        path = common.fresh_sqlite(Path(tmp))
        store = SqliteStore(path)
        await store.open()
        try:
            print(
                json.dumps(
                    {
                        "db": "sqlite",
                        "runs": runs + 10,
                        "seed_seconds": round(await seed(store, runs), 1),
                    }
                )
            )
            await measure(store, "sqlite", reads)
        finally:
            await store.close()
        for name, plan in sqlite_plans(path).items():
            print(f"--- SQLite, {name} of one customer:\n{plan}")


def main(argv: Sequence[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", default="pg,sqlite")
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--reads", type=int, default=200)
    args = p.parse_args(argv)
    print(json.dumps({"load_before": common.load_avg()}))
    for db in args.db.split(","):
        asyncio.run({"pg": on_pg, "sqlite": on_sqlite}[db](args.runs, args.reads))
    print(json.dumps({"load_after": common.load_avg()}))


if __name__ == "__main__":
    main(sys.argv[1:])
