"""Fleets of real processes on one PostgreSQL database: one engine is SIGKILLed mid-burst.

Every run must complete exactly once with every checkpoint recorded once. A local step runs
twice only if it was in flight in the killed process; a remote step runs twice only when its
attempt fell silent (a result the killed engine had taken off the transport is lost with it,
and the attempt is retried), and never more than once more. Runs that fail each start exactly
one failure handler, killed engine or not.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runlane import Engine, RunStatus
from runlane.models import RunQuery
from runlane.stores import open_store
from tests.helpers import snapshot
from tests.queues import purge
from tests.servers import REPO

from . import fleet_app
from .fleet_app import fails, mixed, three

APP = fleet_app.__name__


def _spawn(role: str, pg_url: str, kind: str, prefix: str, log: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", APP, role, pg_url, kind, prefix, str(log)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "READY" in line, line
    return proc


async def _reset(pg_url: str) -> None:
    store: Any = open_store(pg_url)
    await store.open()
    await store.reset_for_tests()
    await store.close()


async def _start(pg_url: str, workflow: Any, n: int) -> None:
    engine = Engine(open_store(pg_url), workflows=[workflow], drive=False)
    async with engine:
        for i in range(n):
            await engine.start(workflow, None, run_id=f"f{i:04d}")


async def _progress(pg_url: str) -> tuple[int, list[Any]]:
    store: Any = open_store(pg_url)
    await store.open()
    try:
        runs = await store.list_runs(limit=5000)
        steps = [await store.list_steps(r.id) for r in runs]
    finally:
        await store.close()
    done = sum(1 for r in runs if r.status == RunStatus.COMPLETED)
    return done, list(zip(runs, steps, strict=True))


def _wait_until(pg_url: str, target: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    done = 0
    while time.monotonic() < deadline:
        done, _ = asyncio.run(_progress(pg_url))
        if done >= target:
            return done
        time.sleep(0.3)
    return done


async def _wait_for(
    pg_url: str, workflow: str, status: RunStatus, target: int, timeout: float
) -> int:
    """How many runs of ``workflow`` are ``status`` once ``target`` are, or at the timeout."""
    store: Any = open_store(pg_url)
    await store.open()
    query = RunQuery(workflow=workflow, status=status)
    deadline = time.monotonic() + timeout
    try:
        while True:
            found = int((await store.count_runs(query)).get(status, 0))
            if found >= target or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.02)
    finally:
        await store.close()


def _busiest(procs: list[subprocess.Popen[str]], log: Path) -> subprocess.Popen[str]:
    """The member that logged the latest step (the first member when none did yet)."""
    lines = log.read_text().splitlines() if log.exists() else []
    pids = [int(line.split()[2]) for line in lines[-1:] if len(line.split()) == 3]
    return next((p for p in procs if pids and p.pid == pids[0]), procs[0])


def _stop(procs: list[subprocess.Popen[str]], tmp_path: Path) -> None:
    """SIGTERM the members still alive, and keep every member's output beside the test."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        out, _ = proc.communicate(timeout=30)
        (tmp_path / f"proc-{proc.pid}.out").write_text(out or "")


def _fleet_run(
    pg_url: str, kind: str, workflow: Any, n: int, steps: int, tmp_path: Path, remote: int = 0
) -> None:
    asyncio.run(_reset(pg_url))
    prefix = f"rlfleet-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "steps.log"
    asyncio.run(_start(pg_url, workflow, n))
    procs = [_spawn("engine", pg_url, kind, prefix, log) for _ in range(3)]
    if kind != "none":
        procs += [_spawn("worker", pg_url, kind, prefix, log) for _ in range(2)]
    try:
        half = _wait_until(pg_url, n // 2, 60)
        assert half >= n // 2, f"only {half}/{n} runs completed before the kill"
        killed = procs[0].pid
        os.kill(killed, signal.SIGKILL)
        procs[0].wait(10)
        done = _wait_until(pg_url, n, 150)
    finally:
        _stop(procs, tmp_path)
        if kind != "none":  # what the members left under the run's prefix
            asyncio.run(purge(fleet_app.transport(kind, pg_url, prefix)))
    _, rows = asyncio.run(_progress(pg_url))
    unfinished = [
        (run.id, run.status, run.error, [(r.seq, r.status, r.attempts) for r in records])
        for run, records in rows
        if run.status != RunStatus.COMPLETED
    ]
    assert done == n, f"{done}/{n} runs completed; the others: {unfinished[:10]}"
    for run, records in rows:
        assert run.status == RunStatus.COMPLETED
        assert [r.seq for r in records] == list(range(1, steps + 1)), (run.id, records)
        assert all(r.status == "completed" for r in records)
    lines = [line.split() for line in log.read_text().splitlines()]
    executions = Counter(f"{run} {seq}" for run, seq, _ in lines)
    assert len(executions) == n * steps
    first_by: dict[str, str] = {}
    for run, seq, pid in lines:
        first_by.setdefault(f"{run} {seq}", pid)
    again = [k for k, v in executions.items() if v > 1]
    # Only a step in flight in the killed process may run twice: at most once more, at most one
    # step per run, and its first execution was in the killed process.
    assert all(executions[k] == 2 for k in again), again
    assert len({k.split()[0] for k in again}) == len(again), again
    local_again = [k for k in again if int(k.split()[1]) != remote]
    assert all(first_by[k] == str(killed) for k in local_again), (killed, again)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_three_engine_processes_one_killed_complete_every_run_exactly_once(
    pg_url: str, tmp_path: Path
) -> None:
    _fleet_run(pg_url, "none", three, 1000, 3, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["redis", "db"])
def test_engines_and_workers_over_a_transport_survive_a_killed_engine(
    pg_url: str, kind: str, tmp_path: Path
) -> None:
    _fleet_run(pg_url, kind, mixed, 300, 2, tmp_path, remote=2)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_failed_runs_each_start_exactly_one_handler_though_an_engine_is_killed(
    pg_url: str, tmp_path: Path
) -> None:
    n = 400
    asyncio.run(_reset(pg_url))
    procs = [_spawn("engine", pg_url, "none", "rlfail", tmp_path / "steps.log") for _ in range(3)]

    async def start_and_kill_as_failures_begin() -> tuple[int, subprocess.Popen[str]]:
        starting = asyncio.create_task(_start(pg_url, fails, n))
        begun = await _wait_for(pg_url, "fleet.fails", RunStatus.FAILED, 1, 60)
        # The member that logged the last step is inside it (each sleeps 50-500 ms): it holds
        # a run, however a loaded machine spread the burst over the members.
        victim = _busiest(procs, tmp_path / "steps.log")
        os.kill(victim.pid, signal.SIGKILL)
        await starting
        return begun, victim

    try:
        begun, victim = asyncio.run(start_and_kill_as_failures_begin())
        assert begun >= 1, "no run failed within 60 s"
        victim.wait(10)
        handled = asyncio.run(_wait_for(pg_url, "fleet.alert", RunStatus.COMPLETED, n, 150))
    finally:
        _stop(procs, tmp_path)
    runs, _ = asyncio.run(snapshot(pg_url, steps=False))
    failed = {r.id: r for r in runs if r.workflow == "fleet.fails"}
    handlers = {r.id: r for r in runs if r.workflow == "fleet.alert"}
    assert handled == n, f"{handled}/{n} handlers completed"
    assert len(failed) == n and len(runs) == 2 * n
    # The kill landed mid-burst: runs the killed engine held were recovered by the others.
    assert any(r.recoveries for r in failed.values()), "the killed engine held no run"
    assert all(r.status == RunStatus.FAILED and r.failures == 1 for r in failed.values())
    assert sorted(handlers) == sorted(f"{run_id}.failure.1" for run_id in failed)
    for handler in handlers.values():
        assert handler.input["run_id"] == handler.id.removesuffix(".failure.1")
        assert handler.input["status"] == "failed"
