"""Three engine processes drive one schedule due every second: each window starts one run."""

from __future__ import annotations

import asyncio
import itertools
import signal
import sys
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runlane.stores.postgres import PostgresStore
from tests.servers import spawn_ready

APP = "tests.integration.schedule_app"


async def _schedule_runs(url: str) -> list[Any]:
    store = PostgresStore(url)
    await store.open()
    try:
        return await store.list_runs(tag="schedule:tick", limit=10_000)
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_three_engine_processes_start_each_window_of_an_every_second_schedule_once(
    pg_url: str, tmp_path: Path
) -> None:
    database = f"runlane_sched_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    url = f"{pg_url.rsplit('/', 1)[0]}/{database}"
    log = tmp_path / "executed.log"
    asyncio.run(PostgresStore(url).open())  # migrated once before the three open at once
    try:
        procs = [
            spawn_ready([sys.executable, "-m", APP, url, str(log)], tmp_path / f"engine-{n}.out")
            for n in range(3)
        ]
        time.sleep(20)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(60) == 0
        runs = asyncio.run(_schedule_runs(url))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    windows = sorted(datetime.strptime(r.id.rsplit(":", 1)[1], "%Y%m%dT%H%M%S%z") for r in runs)
    assert len(windows) >= 15, f"only {len(windows)} windows fired in 20 s"
    gaps = [(a, b) for a, b in itertools.pairwise(windows) if (b - a).total_seconds() != 1]
    assert not gaps, f"windows missing or doubled between: {gaps}"
    executed = Counter(line.split()[0] for line in log.read_text().splitlines())
    done = [r.id for r in runs if r.status == "completed"]
    assert all(executed[run_id] == 1 for run_id in done), executed
    assert len(done) >= len(runs) - 3  # the last windows may have been drained mid-run
    pids = {line.split()[1] for line in log.read_text().splitlines()}
    assert len(pids) >= 2, "one engine fired and ran everything"
