"""The benchmark workloads still run against the engine as it is (tiny sizes, SQLite): a change
of semantics the workloads wait on (a status, a figure) shows here, not an hour into
``make bench``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMALL = {
    "throughput": {"n": 20},
    "latency": {"runs": 3, "steps": 3},
    "queue": {"keys": 2, "per_key": 3},
    "handoff": {"per_key": 4},
    "step_queue": {"n": 20, "chain": 4},
    "schedules": {"n": 20},
    "fan_out": {"n": 20},
}


def test_the_benchmark_workloads_run_on_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    command = [sys.executable, "benchmarks/workloads.py", "--db", "sqlite"]
    command += ["--workloads", ",".join(SMALL), "--params", json.dumps(SMALL), "--json", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["workload"] for line in lines] == list(SMALL)
    figures = {line["workload"]: line for line in lines}
    assert figures["step_queue"]["handoffs"] == SMALL["step_queue"]["chain"]
    assert figures["step_queue"]["peak_inside"] <= 8
    assert figures["queue"]["overlapping_pairs"] == 0


async def test_statement_counts_see_the_postgres_stores_statements(pg_url: str) -> None:
    spec = importlib.util.spec_from_file_location("pgcount", ROOT / "benchmarks" / "pgcount.py")
    assert spec is not None and spec.loader is not None
    pgcount = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pgcount)
    from runlane.stores.postgres import PostgresStore

    store = PostgresStore(pg_url)
    await store.open()
    try:
        await store.get_run("warm")  # prepared here: the count below is the steady state
        with pgcount.count_statements() as counts:
            await store.get_run("never-created")
            await store._db.batch(("get_run", {"id": "a"}), ("get_run", {"id": "b"}))
    finally:
        await store.close()
    assert (counts["statements"], counts["waits"]) == (3, 2)  # two round trips
