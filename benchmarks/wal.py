"""WAL bytes per run on PostgreSQL, by relation and record, on a server of this benchmark's own.

    .venv/bin/python benchmarks/wal.py [--n 1000] [--top 25] [--json FILE]

The WAL is the whole cluster's, so on the machine's PostgreSQL every neighbour's write lands in
a run's figure. Here a private server (``tests/servers.py``'s ``PrivatePostgres``: ``initdb``
and ``pg_ctl`` on a loopback port) holds only runlane's database: after a warm-up, ``--n``
one-step runs started together (workload (a) of the job queues), then ``--n`` keyed runs of
``--keys`` singleton lanes of limit 1 (workload (b)); the WAL between the two positions each
side took is read back with ``pg_waldump`` and summed per relation and record type. ``rec`` is
the records without their full-page images, ``total`` with them (a page's first change after a
checkpoint carries its image; the run starts right after one, so ``total`` is the high mark).
Figures that do not depend on the machine's load: the same code writes the same bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import workloads

from tests.servers import PrivatePostgres, _pg_bin

RECORD = re.compile(r"len \(rec/tot\):\s*(\d+)/\s*(\d+)")
RELATION = re.compile(r"rel \d+/\d+/(\d+)")
DESC = re.compile(r"desc: (\S+)")
RMGR = re.compile(r"rmgr: (\S+)")


def lsn(url: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def relations(url: str) -> dict[str, str]:
    """Each relation's file number, to its name (the records name the file)."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relfilenode::text, relname FROM pg_class WHERE relfilenode <> 0"
        )
        return dict(rows.fetchall())


def read_wal(server: PrivatePostgres, start: str, end: str, names: dict[str, str]) -> list[Any]:
    """Every record between ``start`` and ``end``: (relation or resource manager, record type,
    bytes without full-page images, bytes with them)."""
    dump = subprocess.run(
        [_pg_bin("pg_waldump"), "-p", str(server.data / "pg_wal"), "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    found = []
    for line in dump.splitlines():
        sizes, desc = RECORD.search(line), DESC.search(line)
        if sizes is None or desc is None:
            continue
        relation = RELATION.search(line)
        rmgr = RMGR.search(line)
        where = names.get(relation.group(1), relation.group(1)) if relation else None
        found.append((where or (rmgr.group(1) if rmgr else "?"), desc.group(1),
                      int(sizes.group(1)), int(sizes.group(2))))  # fmt: skip
    return found


def summary(records: list[Any], n: int, top: int) -> dict[str, Any]:
    rec: Counter[tuple[str, str]] = Counter()
    total: Counter[tuple[str, str]] = Counter()
    count: Counter[tuple[str, str]] = Counter()
    for where, kind, plain, whole in records:
        rec[where, kind] += plain
        total[where, kind] += whole
        count[where, kind] += 1
    return {
        "rec_bytes_per_run": round(sum(rec.values()) / n, 1),
        "total_bytes_per_run": round(sum(total.values()) / n, 1),
        "records_per_run": round(sum(count.values()) / n, 2),
        "by_record": [
            {
                "relation": where,
                "record": kind,
                "rec_bytes_per_run": round(rec[where, kind] / n, 1),
                "total_bytes_per_run": round(total[where, kind] / n, 1),
                "per_run": round(count[where, kind] / n, 2),
            }
            for (where, kind), _ in total.most_common(top)
        ],
    }


async def measure(server: PrivatePostgres, n: int, keys: int, top: int) -> dict[str, Any]:
    import psycopg

    url = server.create_database("wal")
    target = workloads.Target("pg", Path(tempfile.mkdtemp()), url=url)
    figures: dict[str, Any] = {}
    async with target.engine(workloads.steps_wf) as engine:
        await workloads.warm_up(engine, 1)
        await workloads.timed_batch(engine, 200, 1)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        start = lsn(url)
        await workloads.timed_batch(engine, n, 1)
        end = lsn(url)
    figures["one-step runs"] = summary(read_wal(server, start, end, relations(url)), n, top)
    probe = workloads.KeyProbe()
    keyed = workloads.keyed_workflow(probe, 0.0)
    inputs = [{"key": f"key-{j % keys:03d}", "seq": j} for j in range(n)]
    probe.expected = n
    async with target.engine(keyed) as engine:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        start = lsn(url)
        ids, _ = await workloads.enqueue(engine, keyed, inputs, probe, None)
        await workloads.wait_settled(engine, probe, ids)
        end = lsn(url)
    figures[f"keyed runs, {keys} lanes"] = summary(
        read_wal(server, start, end, relations(url)), n, top
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="runs of each workload")
    parser.add_argument("--keys", type=int, default=50, help="lanes of the keyed workload")
    parser.add_argument("--top", type=int, default=25, help="records listed per workload")
    parser.add_argument("--json", default="", help="write the figures to this file too")
    args = parser.parse_args()
    server = PrivatePostgres({"wal_level": "replica"})
    server.start()
    try:
        figures = asyncio.run(measure(server, args.n, args.keys, args.top))
    finally:
        server.destroy()
    for workload, found in figures.items():
        print(f"{workload}: {found['rec_bytes_per_run']:,} B/run without page images,"
              f" {found['total_bytes_per_run']:,} with them, {found['records_per_run']} records")  # fmt: skip
        for row in found["by_record"]:
            print(f"  {row['total_bytes_per_run']:8.1f} {row['rec_bytes_per_run']:8.1f}"
                  f" {row['per_run']:6.2f}  {row['relation']} {row['record']}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
