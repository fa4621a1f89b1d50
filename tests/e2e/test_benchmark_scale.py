"""The job-queue workloads' runlane side (``benchmarks/queues.py``), the million-run seeder
(``benchmarks/million.py``) and the WAL count (``benchmarks/wal.py``) still run against the
engine as it is, at a tiny size. No timing is asserted: speed lives in ``benchmarks/``."""

from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from runlane.models import RunQuery, RunStatus

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> Any:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("batched", [False, True], ids=["one-at-a-time", "start_many"])
async def test_the_queue_workloads_runlane_side_keeps_each_key_in_order(
    tmp_path: Path, batched: bool
) -> None:
    queues, workloads = _module("queues"), _module("workloads")
    target = workloads.Target("sqlite", tmp_path, path=tmp_path / "q.db")
    sizes = {"n": 12, "keys": 3, "per_key": 4, "runs": 2, "step_ms": 1.0}
    figures = {}
    for phase in ("throughput", "perkey", "hotkey", "latency"):
        args = argparse.Namespace(phase=phase, batched=batched, **sizes)
        probe = workloads.KeyProbe()
        keyed = workloads.keyed_workflow(probe, args.step_ms)
        async with target.engine(workloads.steps_wf, keyed) as engine:
            figures[phase] = await queues.runlane_phase(args, engine, probe, keyed)
    assert [figures[p]["jobs"] for p in ("throughput", "perkey", "hotkey", "latency")] == [
        12,
        12,
        4,
        2,
    ]
    for phase in ("perkey", "hotkey"):
        assert figures[phase]["overlapping_pairs"] == 0, figures[phase]
        assert figures[phase]["fifo_violations_within_key"] == 0, figures[phase]
    assert figures["latency"]["median_ms"] > 0


async def test_the_million_seeder_writes_finished_runs_and_full_lanes(tmp_path: Path) -> None:
    million, workloads = _module("million"), _module("workloads")
    size = {"finished": 200, "active": 30, "keys": 10, "values": 5, "reps": 1}
    target = workloads.Target("sqlite", tmp_path, path=tmp_path / "m.db")
    store = target.store()
    await store.open()
    await store.close()
    million.seed_sqlite(target.path, size)
    await store.open()
    try:
        counts = await store.count_runs(RunQuery())
        page = await store.page_runs(RunQuery(attributes={"customer": "c-2"}), 100)
        timed = await million.time_reads(store, size, 1)
        lanes = await million.reads(size)["lanes, all (all_lanes)"](store)
    finally:
        await store.close()
    assert counts == {
        RunStatus.COMPLETED: 190,
        RunStatus.FAILED: 10,
        RunStatus.SUSPENDED: 10,
        RunStatus.BLOCKED: 20,
    }
    assert len(page) == 46  # 40 finished and 6 active runs have customer c-2
    assert set(timed) == {*million.reads(size), "lanes, all, start-up not frozen"}
    assert gc.get_freeze_count() == 0  # the process is left as it was
    assert len(lanes.lanes) == 10
    assert all(len(lane.holders) == 1 and len(lane.waiters) == 2 for lane in lanes.lanes)


@pytest.mark.slow
async def test_the_wal_count_reads_each_runs_records_back_by_relation() -> None:
    from tests.servers import PrivatePostgres

    wal = _module("wal")
    server = PrivatePostgres({"wal_level": "replica"})
    server.start()
    try:
        figures = await wal.measure(server, 20, 4, 50)
    finally:
        server.destroy()
    for found in figures.values():
        written = {(row["relation"], row["record"]) for row in found["by_record"]}
        assert ("runlane_runs", "INSERT") in written and ("runlane_steps", "INSERT") in written
        assert found["total_bytes_per_run"] >= found["rec_bytes_per_run"] > 0


def test_the_issue_sections_are_rendered_again_in_place_and_the_rest_is_left_alone() -> None:
    report = _module("scale_report")
    text = (ROOT / "BENCHMARKS.md").read_text()
    again = report.splice(text)
    assert report.splice(again) == again
    before, after = text.split("\n## 14. ")[0], again.split("\n## 14. ")[0]
    assert before == after  # what `make bench` wrote is kept
    assert again.index("\n## 16. ") < again.index("\n## Analysis")
    assert again.split("\n## Analysis", 1)[1] == text.split("\n## Analysis", 1)[1]


def test_the_queue_targets_are_judged_on_runlanes_better_side_and_show_both() -> None:
    report = _module("scale_report")

    def side(seconds: float, **order: int) -> dict[str, float]:
        costs = ("client_cpu_ms_per_job", "server_cpu_ms_per_job", "wal_bytes_per_job")
        return {"seconds": seconds, "commits_per_job": 1.0, **dict.fromkeys(costs, 1.0), **order}

    clean = {"overlapping_pairs": 0, "fifo_violations_within_key": 0}
    summary = {
        "throughput": {
            "runlane": side(1.2),
            "runlane-batched": side(0.6),
            "procrastinate": side(2.0),
            "graphile-worker": side(1.5),
            "pg-boss": side(50.0),
        },
        "perkey": {
            "runlane": side(1.5, **clean),
            "runlane-batched": side(1.0, overlapping_pairs=1, fifo_violations_within_key=0),
            "procrastinate": side(2.0, **clean),
            "graphile-worker": side(1.7, **clean),
            "pg-boss": side(50.0, **clean),
        },
    }
    rows = {r.split(" | ")[0].lstrip("| "): r for r in report.queue_targets(summary)}
    throughput = rows["(a) throughput: >= 2x graphile-worker"]
    assert "1.25x one at a time, 2.50x batched" in throughput and "**met**" in throughput
    assert "**missed**" in rows["(b) per-key: >= 2x graphile-worker"]
    # an overlap on either side fails the order target
    assert "**missed**" in rows["(b) zero overlaps and FIFO violations (runlane, both sides)"]
    assert "not measured" in rows["(c) latency: runlane's median below every queue's"]
    cells = report.queue_rows("throughput", summary["throughput"])
    assert any(c.startswith("| graphile-worker | 1.50") and "1.25x / 2.50x" in c for c in cells)
    assert report.load_words({"load_start": [0.2], "load_end": [0.4]}) == "the machine was quiet"
    assert "loaded" in report.load_words({"load_start": [3.0], "load_end": [0.4]})
