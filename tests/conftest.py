"""Shared fixtures: every store kind through one factory, on real services.

PostgreSQL: one throw-away database per test session (``runlane_test_<random>``), dropped at the
end; tests that use it get the tables emptied first. Override the server with
``RUNLANE_TEST_PG`` (a libpq URL to an existing database used as the admin connection).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runlane.stores import MemoryStore
from runlane.stores.base import Store

# ``make test`` runs in two phases on xdist workers (each with its own session, so its own
# database): everything else first, on two, then the tests below marked ``heavy`` (they start
# processes or servers, or lean on timing: heartbeats, leases and step timeouts of a fraction
# of a second) on three, with the machine to themselves. Run beside the first phase, whose
# workers keep both cores busy, a heavy one overran PostgreSQL's 100 connections or saw a beat
# late enough to fail a run for the wrong reason; heavy tests mostly wait (run one at a time,
# the phase took 12 minutes and 5.6 minutes of CPU), so three side by side take 5.
HEAVY_MODULES = {
    # processes and servers
    "test_cli",
    "test_crash_recovery",
    "test_worker_cli",
    "test_node_worker",
    "test_remote_workflow_processes",
    # timing
    "test_delivery",
    "test_remote_workflows",
    "test_engine_core",
    "test_lease_fence",
    "test_outages",
    "test_pg_connection_loss",
    "test_worker",
    "test_instance_paths",
    "test_fencing",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        if item.get_closest_marker("slow") is not None or module in HEAVY_MODULES:
            item.add_marker(pytest.mark.heavy)


STORE_KINDS = ["memory", "sqlite", "postgres"]
ADMIN_URL = os.environ.get("RUNLANE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    import psycopg

    name = f"runlane_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _new_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        from runlane.stores.sqlite import SqliteStore

        return SqliteStore(tmp_path / "runlane.db")
    if kind == "postgres":
        from runlane.stores.postgres import PostgresStore

        url = request.getfixturevalue("pg_url")
        return PostgresStore(url)
    raise ValueError(kind)


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Callable[[], Store]:
    """Build another store object on the same backend (same file or database), e.g. per engine."""

    def build() -> Store:
        return _new_store(store_kind, tmp_path, request)

    return build


@pytest.fixture
async def store(make_store: Callable[[], Store], store_kind: str) -> AsyncIterator[Store]:
    """An opened, empty store of each kind."""
    s = make_store()
    await s.open()
    if store_kind == "postgres":
        await _truncate(s)
    try:
        yield s
    finally:
        await s.close()


async def _truncate(store: Any) -> None:
    reset = getattr(store, "reset_for_tests", None)
    if reset is not None:
        await reset()


@pytest.fixture
def clock() -> Any:
    from runlane.testing import ManualClock

    return ManualClock()


@pytest.fixture
async def make_engine(
    make_store: Callable[[], Store], store_kind: str, clock: Any
) -> AsyncIterator[Callable[..., Any]]:
    """Build engines (drive=False, ManualClock) on the current store kind; all share one backend."""
    from runlane import Engine

    engines: list[Any] = []
    shared: dict[str, Store] = {}

    async def build(*workflows: Any, share_store: bool = True, **kwargs: Any) -> Any:
        if share_store and "store" in shared:
            st = shared["store"]
        else:
            st = make_store()
            if not engines and store_kind == "postgres":
                await st.open()
                await _truncate(st)
                await st.close()
            shared.setdefault("store", st)
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("drive", False)
        engine = Engine(st, workflows=list(workflows), **kwargs)
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        await engine.drain(timeout=2)
        await engine.store.close()
