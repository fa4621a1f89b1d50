"""The files the docs include (docs/examples/) run, and do what the pages say.

Scripts are imported and their ``main()`` awaited; those that need PostgreSQL and Redis get a
throw-away database (the session's, emptied first) and Redis key prefix (purged afterwards). The
pytest modules among them run in a pytest of their own, in pytest-asyncio's strict mode, as a
user's project would run them. The tutorial's app is killed with SIGKILL mid-run and started
again, as the tutorial tells the reader to.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from runlane.stores.postgres import PostgresStore
from runlane.stores.sqlite import SqliteStore
from runlane.transports import RedisTransport
from tests.integration.test_node_worker import NODE, node_modules, node_worker, prefix, start_node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")

EMBEDDED = [
    "singleton",
    "quotas",
    "namespaces",
    "step_queues",
    "rate_limits",
    "schedules",
    "deploys",
    "updates",
    "operating_runs",
    "encryption",
    "fencing",
]
ON_SERVICES = ["fleet", "remote_workers"]
PYTEST_MODULES = ["test_workflows", "test_my_store", "test_my_transport"]
ON_THEIR_OWN = ["tutorial", "node_engine"]  # a test of their own below

# The Node worker's fixtures, used here.
__all__ = ["node_modules", "node_worker", "prefix", "start_node"]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_file_is_run_by_a_test() -> None:
    covered = EMBEDDED + ON_SERVICES + PYTEST_MODULES + ON_THEIR_OWN
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(covered)


@pytest.mark.parametrize("name", EMBEDDED)
async def test_an_embedded_example_runs(name: str) -> None:
    await load(name).main()


@pytest.fixture
async def services(pg_url: str) -> AsyncIterator[tuple[str, str, str]]:
    """The session's PostgreSQL database, emptied, and a Redis key prefix purged afterwards."""
    store = PostgresStore(pg_url)
    await store.open()
    await store.reset_for_tests()
    await store.close()
    key_prefix = f"rldocs-{uuid.uuid4().hex[:8]}"
    yield pg_url, REDIS_URL, key_prefix
    transport = RedisTransport(REDIS_URL, prefix=key_prefix)
    await transport.open()
    await transport.purge()
    await transport.close()


async def test_the_fleet_example_runs_its_invoices_on_two_engines(
    services: tuple[str, str, str],
) -> None:
    outputs = await load("fleet").main(*services)
    assert outputs == [f"sent invoice {n}" for n in range(10)]


async def test_the_remote_workers_example_runs_a_remote_step_and_a_remote_workflow(
    services: tuple[str, str, str],
) -> None:
    outputs = await load("remote_workers").main(*services)
    assert outputs == [{"order": "o-1", "charged": 30}, {"rows": 3, "charged": 3}]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_the_node_engine_example_runs_with_the_node_workers(
    pg_url: str, prefix: str, node_worker: subprocess.Popen[str]
) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    await store.reset_for_tests()
    await store.close()
    try:
        output: Any = await load("node_engine").main(pg_url, REDIS_URL, prefix)
    finally:
        transport = RedisTransport(REDIS_URL, prefix=prefix)
        await transport.open()
        await transport.purge()
        await transport.close()
    assert output["loud"] == "HELLO ADA" and output["child"] == "BY SEA"


@pytest.mark.parametrize("name", PYTEST_MODULES)
def test_an_example_test_module_passes_in_strict_mode(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
         "asyncio_mode=strict", str(EXAMPLES / f"{name}.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """Start the tutorial's app.py on one SQLite file, as many times as asked."""
    started: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "tutorial.py"), str(tmp_path / "tutorial.db")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.mark.slow
async def test_the_tutorial_app_killed_during_its_sleep_finishes_without_pulling_again(
    app: Callable[[], subprocess.Popen[str]], tmp_path: Path
) -> None:
    first = app()
    assert first.stdout is not None
    assert first.stdout.readline() == "pulling the stock of store A\n"
    await until_suspended(tmp_path / "tutorial.db", "sync-A")

    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    out, err = app().communicate(timeout=60)

    assert out.splitlines() == ["reconciling 1200 SKUs", "completed {'reconciled': 1200}"], err


async def until_suspended(path: Path, run_id: str) -> None:
    """Wait until the run sleeps durably (its step recorded), or say what it was when giving up."""
    store = SqliteStore(path)
    await store.open()
    try:
        deadline = time.monotonic() + 30
        run = await store.get_run(run_id)
        while time.monotonic() < deadline:
            run = await store.get_run(run_id)
            if run is not None and run.status == "suspended":
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} never suspended: {run}")
    finally:
        await store.close()
