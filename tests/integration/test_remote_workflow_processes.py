"""Remote workflow turns across processes: an engine on SQLite or PostgreSQL, Redis between it
and `runlane worker` processes that hold the workflow's code (the engine does not)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runlane import Engine, RemoteWorkflow, Run, RunStatus
from runlane.stores.base import Store
from runlane.transports import RedisTransport
from tests.helpers import settled

from . import remote_workflow_app as app

HERE = Path(__file__).parent
ORDER = RemoteWorkflow("order", group="orders")


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def prefix() -> str:
    return f"rl-rwf-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    path = tmp_path / "marks"
    path.mkdir()
    return path


def start_worker(prefix: str, marks: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "RUNLANE_TEST_PREFIX": prefix,
        "RUNLANE_TEST_MARKS": str(marks),
        "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    command = "from runlane.cli import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", command, "worker", "remote_workflow_app:worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def workers(prefix: str, marks: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        _, errors = proc.communicate(timeout=10)  # reaps it and closes its stderr pipe
        if errors:
            print(f"worker {proc.pid} said:\n{errors}")  # shown when the test fails


def count(marks: Path, name: str) -> int:
    return len(list(marks.glob(f"{name}.*")))


async def until_marked(marks: Path, name: str, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if count(marks, name):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {name!r} mark after {timeout}s: {sorted(os.listdir(marks))}")


async def drive(store: Store, prefix: str, body: object, **options: Any) -> Run:
    transport = RedisTransport(app.REDIS_URL, prefix=prefix)
    engine = Engine(
        store, transport=transport, remote_workflows=[ORDER], poll_interval=0.1, **options
    )
    try:
        async with engine:
            return await body(engine)  # type: ignore[operator, no-any-return]
    finally:
        await transport.purge()
        await transport.close()


async def test_a_worker_process_decides_every_turn_of_a_run(
    store: Store, prefix: str, marks: Path, workers: list[subprocess.Popen[str]]
) -> None:
    workers.append(start_worker(prefix, marks))

    async def body(engine: Engine) -> Run:
        await engine.start("order", {"prepare": 0.0, "amount": 7}, run_id="o1")
        await until_marked(marks, "charge")
        await engine.signal("o1", "ship", "now")
        return await settled(engine, "o1")

    done = await drive(store, prefix, body)
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output == {"prepared_by": workers[0].pid, "charged": 7, "said": "now"}
    assert count(marks, "charge") == 1


async def test_a_worker_killed_mid_turn_leaves_the_turn_to_another_worker(
    store: Store, prefix: str, marks: Path, workers: list[subprocess.Popen[str]]
) -> None:
    workers.append(start_worker(prefix, marks))

    async def body(engine: Engine) -> Run:
        await engine.start("order", {"prepare": 1.5, "amount": 9}, run_id="o2")
        await until_marked(marks, "prepare-started")
        workers[0].send_signal(signal.SIGKILL)
        workers.append(start_worker(prefix, marks))
        # The silent turn is sent again under a fresh task id; the new worker decides it.
        await until_marked(marks, "charge", timeout=30)
        await engine.signal("o2", "ship", "later")
        return await settled(engine, "o2")

    done = await drive(store, prefix, body, remote_advance_silence=1.0)
    assert done.status == RunStatus.COMPLETED, done.error
    assert done.output is not None and done.output["prepared_by"] == workers[1].pid
    assert count(marks, "prepare-started") == 2 and count(marks, "prepare-done") == 1
    assert count(marks, "charge") == 1
