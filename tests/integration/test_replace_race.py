"""Replace starts of one singleton key racing from several processes on one PostgreSQL database."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runlane import Engine, RunStatus
from runlane.stores import open_store

from ..helpers import settle
from ..queues import reset_postgres
from .replace_race_app import latest

APP = Path(__file__).with_name("replace_race_app.py")


@pytest.mark.slow
def test_replace_starts_racing_from_four_processes_leave_one_live_run_and_it_executes(
    pg_url: str,
) -> None:
    procs, starts = 4, 10
    asyncio.run(reset_postgres(pg_url))
    at = time.time() + 2.5  # every process has connected by then; they all fire at once
    children = [
        subprocess.Popen(
            [sys.executable, str(APP), pg_url, str(starts), str(p), str(at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for p in range(procs)
    ]
    for child in children:
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0 and f"started={starts}" in out, out
    asyncio.run(_one_live_run_executes(pg_url, procs * starts))


async def _one_live_run_executes(url: str, total: int) -> None:
    async with Engine(open_store(url), workflows=[latest], drive=False) as engine:
        runs = await engine.list_runs(workflow=latest, limit=total + 1)
        assert len(runs) == total
        live = [r for r in runs if r.status != RunStatus.CANCELLED]
        assert len(live) == 1, [(r.id, r.status) for r in live]
        [survivor] = live
        assert survivor.status == RunStatus.PENDING
        await engine.tick()
        run = await engine.get_run(survivor.id)
        assert run is not None and (run.status, run.holds_slot) == (RunStatus.SUSPENDED, True)
        await engine.signal(survivor.id, "done", "the newest")
        assert (await settle(engine, survivor.id)).output == "the newest"
