"""What a start costs the client: CPU, statements and round trips per start, one at a time and
batched (``Engine.start_many``), on an engine that executes nothing (``drive=False``).

    .venv/bin/python benchmarks/start_cost.py --db pg --n 1000 [--json out.jsonl]

Three kinds of start: ``plain`` (no gate), ``keyed`` (a singleton key per run, 20 runs a key),
``quota`` (a quota key per run). Round trips are counted by a loopback proxy
(``roundtrips.py``), statements by patching psycopg (``pgcount.py``); on SQLite only CPU and
wall time. Each line is one kind and one way (``one`` or ``batched``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common
from pgcount import count_statements
from roundtrips import RoundTripProxy

import runlane
from runlane import Concurrency, Engine, Singleton
from runlane.stores import PostgresStore, SqliteStore
from runlane.stores.base import Store

PER_KEY = 20


@runlane.workflow(name="cost.plain")
async def plain_wf(ctx: runlane.Context, i: dict[str, Any]) -> None:
    return None


@runlane.workflow(name="cost.keyed", singleton=Singleton(key=lambda i: f"k{i['key']}"))
async def keyed_wf(ctx: runlane.Context, i: dict[str, Any]) -> None:
    return None


@runlane.workflow(
    name="cost.quota", concurrency=Concurrency(key=lambda i: f"q{i['key']}", limit=1000)
)
async def quota_wf(ctx: runlane.Context, i: dict[str, Any]) -> None:
    return None


KINDS = {"plain": plain_wf, "keyed": keyed_wf, "quota": quota_wf}


def make_store(db: str, tmp: Path, proxy: RoundTripProxy | None) -> Store:
    if db == "pg":
        url = common.fresh_pg()
        return PostgresStore(proxy.url(url) if proxy else url)
    return SqliteStore(str(common.fresh_sqlite(tmp)))


async def start_cost(target: Any, n: int = 1000, kind: str = "keyed") -> dict[str, Any]:
    """The harness's workload (``workloads.py``): one kind of start, one at a time then
    batched, on a fresh store each; the figures of both in one line."""
    proxy = RoundTripProxy() if target.db == "pg" else None
    figures: dict[str, Any] = {"kind": kind, "n": n}
    for way in ("one", "batched"):
        line = await measure(
            make_store(target.db, target.tmp, proxy), kind, n, way == "batched", proxy
        )
        for name in (
            "cpu_ms_per_start",
            "wall_ms_per_start",
            "starts_per_s",
            "statements_per_start",
            "round_trips_per_start",
        ):
            figures[f"{way}_{name}"] = line[name]
    return figures


async def measure(store: Store, kind: str, n: int, batched: bool, proxy: Any) -> dict[str, Any]:
    workflow = KINDS[kind]
    inputs = [{"key": i // PER_KEY, "i": i} for i in range(n)]
    engine = Engine(store, workflows=[workflow], drive=False, consumers="never", announce=False)
    async with engine:
        await engine.start(workflow, {"key": -1, "i": -1})  # warm: pool, prepared statements
        if batched:
            await engine.start_many([runlane.Start(workflow, {"key": -2, "i": -2})])
        trips0 = proxy.trips if proxy else 0
        with count_statements() as counts:
            cpu0, t0 = time.process_time(), time.perf_counter()
            if batched:
                starts = [runlane.Start(workflow, i) for i in inputs]
                outcomes = await engine.start_many(starts)
                assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok][:3]
            else:
                for i in inputs:
                    await engine.start(workflow, i)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        trips = (proxy.trips - trips0) if proxy else None
    return {
        "kind": kind,
        "way": "batched" if batched else "one",
        "n": n,
        "cpu_ms_per_start": round(cpu * 1000 / n, 4),
        "wall_ms_per_start": round(wall * 1000 / n, 4),
        "starts_per_s": round(n / wall, 1),
        "statements_per_start": round(counts["statements"] / n, 3) if proxy else None,
        "round_trips_per_start": round(trips / n, 4) if trips is not None else None,
    }


async def run(db: str, n: int, ways: Sequence[str], path: str) -> None:
    proxy = RoundTripProxy() if db == "pg" else None
    with tempfile.TemporaryDirectory(prefix="runlane-cost-") as tmp:
        for kind in KINDS:
            for way in ways:
                line = await measure(
                    make_store(db, Path(tmp), proxy), kind, n, way == "batched", proxy
                )
                line = {"workload": "start_cost", "db": db, **line}
                print(json.dumps(line), flush=True)
                if path:
                    with open(path, "a") as f:
                        f.write(json.dumps(line) + "\n")


def main(argv: Sequence[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=["pg", "sqlite"], default="sqlite")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--ways", default="one,batched")
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    try:
        asyncio.run(run(args.db, args.n, args.ways.split(","), args.json))
    finally:
        if args.db == "pg":
            common.drop_pg()


if __name__ == "__main__":
    main(sys.argv[1:])
