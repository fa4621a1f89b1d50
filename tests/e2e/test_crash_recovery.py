"""A process killed at any point loses no recorded step and re-executes at most the one in flight."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from runlane import Engine, RunStatus
from runlane.stores.sqlite import SqliteStore

APP = Path(__file__).with_name("crash_app.py")
RUNS = 6


def _start(db: Path, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(APP), str(db), str(log), str(RUNS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_sigkill_mid_run_then_restart_completes_every_run_with_no_lost_step(tmp_path: Path) -> None:
    db, log = tmp_path / "crash.db", tmp_path / "steps.log"
    first = _start(db, log)
    deadline = time.monotonic() + 30
    while len(_lines(log)) < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=10)  # reaps it and closes its pipe
    executed_before = len(_lines(log))
    assert 0 < executed_before < RUNS * 5, f"kill landed outside the burst: {executed_before} steps"

    second = _start(db, log)
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0 and "ALL DONE" in out, out

    counts = Counter(_lines(log))
    assert set(counts) == {f"r{r} {s}" for r in range(RUNS) for s in range(5)}
    twice = [k for k, v in counts.items() if v > 1]
    assert all(v <= 2 for v in counts.values()), counts
    assert len(twice) <= RUNS, f"more re-executions than runs in flight: {twice}"

    async def verify() -> None:
        engine = Engine(SqliteStore(db), drive=False)
        async with engine:
            for r in range(RUNS):
                run = await engine.get_run(f"r{r}")
                assert run is not None and run.status == RunStatus.COMPLETED
                assert run.output == [f"r{r}:{s}" for s in range(5)]
                steps = await engine.list_steps(f"r{r}")
                assert [s.seq for s in steps] == [1, 2, 3, 4, 5]

    asyncio.run(verify())


POISON_APP = Path(__file__).with_name("poison_app.py")


def test_a_run_that_kills_its_process_in_every_turn_is_declared_dead_and_its_dead_letter_runs(
    tmp_path: Path,
) -> None:
    db, log = tmp_path / "poison.db", tmp_path / "deaths.log"
    outputs = []
    for _ in range(6):  # the first turn and its two recoveries die; the next process buries it
        proc = subprocess.Popen(
            [sys.executable, str(POISON_APP), str(db), str(log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out, _ = proc.communicate(timeout=90)
        outputs.append(out)
        if proc.returncode != -signal.SIGKILL:
            break
    assert proc.returncode == 0, outputs
    deaths = _lines(log)
    assert len(deaths) == 3 and len({line.split()[1] for line in deaths}) == 3, deaths
    assert "SETTLED dead | completed buried poison (dead, RecoveryLimitExceeded)" in out, outputs

    async def verify() -> None:
        engine = Engine(SqliteStore(db), drive=False)
        async with engine:
            run = await engine.get_run("poison")
            assert run is not None and (run.status, run.failures) == (RunStatus.DEAD, 1)
            assert run.recoveries == 3 and run.error is not None
            handler = await engine.get_run("poison.failure.1")
            assert handler is not None and handler.workflow == "poison.bury"
            assert handler.input["status"] == "dead" and handler.input["run_id"] == "poison"

    asyncio.run(verify())
