"""The transport contract (``runlane.testing.transport_contract``) on every transport.

In-process, db on PostgreSQL, db on SQLite, and Redis. Each test gets a throw-away queue prefix,
purged afterwards, so tests never see each other's messages. The in-process transport has no run
queue: it skips the run-queue cases only. ``round_trips`` counts each backend's requests, so the
contract's bounds on them are checked here. Below the contract: what is particular to one of them.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from runlane.testing import transport_contract
from runlane.testing.transport_contract import *  # noqa: F403  the contract's tests and fixtures
from runlane.transports import (
    DbTransport,
    InProcessTransport,
    RedisTransport,
    Transport,
    open_transport,
)

TRANSPORT_KINDS = ["inprocess", "postgres", "sqlite", "redis"]
QUEUE_KINDS = [k for k in TRANSPORT_KINDS if k != "inprocess"]  # the in-process one has none
REDIS_URL = os.environ.get("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/0")

MakeTransport = Callable[[], Awaitable[Transport]]
transport = transport_contract.transport  # named here too: other test modules borrow the fixtures


@pytest.fixture(params=TRANSPORT_KINDS)
def transport_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_transport(
    transport_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[MakeTransport]:
    """Open another transport object on the same backend and prefix (one shared in-process)."""
    prefix = f"rltest-{uuid.uuid4().hex[:10]}"
    made: list[Transport] = []
    shared = InProcessTransport()

    def new() -> Transport:
        if transport_kind == "inprocess":
            return shared
        if transport_kind == "postgres":
            return DbTransport(request.getfixturevalue("pg_url"), prefix=prefix)
        if transport_kind == "sqlite":
            return DbTransport(f"sqlite:///{tmp_path / 'transport.db'}", prefix=prefix)
        return RedisTransport(REDIS_URL, prefix=prefix)

    async def build() -> Transport:
        transport = new()
        await transport.open()
        made.append(transport)
        return transport

    yield build
    for transport in made:
        await transport.close()
    cleaner = new()
    if isinstance(cleaner, DbTransport | RedisTransport) and transport_kind != "sqlite":
        await cleaner.open()
        await cleaner.purge()
        await cleaner.close()


@pytest.fixture
def round_trips(transport_kind: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """Count the requests a transport makes to its backend while the block runs."""

    @contextmanager
    def counting() -> Iterator[list[int]]:
        count = [0]
        for cls, name in _request_methods(transport_kind):
            monkeypatch.setattr(cls, name, _counted(getattr(cls, name), count))
        yield count
        monkeypatch.undo()

    return counting


def _request_methods(kind: str) -> list[tuple[type, str]]:
    if kind == "postgres":
        import psycopg

        return [(psycopg.AsyncConnection, "execute"), (psycopg.AsyncCursor, "execute")]
    if kind == "sqlite":
        from runlane.transports.db_sqlite import SqliteMessages

        return [(SqliteMessages, "_run")]
    if kind == "redis":
        from redis.asyncio.client import Pipeline, Redis

        return [(Redis, "execute_command"), (Pipeline, "execute")]
    return []


def _counted(method: Any, count: list[int]) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return await method(*args, **kwargs)

    return wrapper


# -------------------------------------------------------------------- opening


@pytest.mark.parametrize("transport_kind", ["postgres", "sqlite"])
async def test_one_transport_opened_by_many_tasks_at_once_opens_once(
    transport_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """An engine and its in-process workers share a transport and each open it at once."""
    url = (
        request.getfixturevalue("pg_url")
        if transport_kind == "postgres"
        else f"sqlite:///{tmp_path / 'shared.db'}"
    )
    transport = DbTransport(url, prefix=f"rltest-{uuid.uuid4().hex[:10]}")
    opened: list[object] = []
    table_open = transport._table.open

    async def counting_open(*args: Any) -> None:
        opened.append(args)
        await table_open(*args)

    transport._table.open = counting_open  # type: ignore[method-assign,assignment]
    try:
        await asyncio.gather(*(transport.open() for _ in range(8)))
        await transport.send_tasks("billing", [{"id": "t1"}])
        got = await transport.take_tasks("billing", 5, 1.0)
        await transport.purge()
    finally:
        await transport.close()

    assert len(opened) == 1
    assert [m["id"] for m in got] == ["t1"]


async def test_inprocess_transport_has_no_run_queue() -> None:
    transport = InProcessTransport()

    assert transport.has_run_queue is False
    with pytest.raises(NotImplementedError):
        await transport.enqueue_runs(
            [{"run_id": "r", "namespace": None, "priority": 0, "reason": "start"}]
        )


# -------------------------------------------------------------------- urls


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("memory://", InProcessTransport),
        ("inprocess://", InProcessTransport),
        ("redis://127.0.0.1:6379/0", RedisTransport),
        ("postgresql://postgres@127.0.0.1/db", DbTransport),
        ("sqlite:///tmp/x.db", DbTransport),
    ],
)
def test_open_transport_picks_the_transport_by_url(url: str, kind: type) -> None:
    assert isinstance(open_transport(url), kind)


def test_open_transport_defaults_to_redis_when_its_url_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RUNLANE_REDIS_URL", "redis://127.0.0.1:6379/3")

    transport = open_transport()

    assert isinstance(transport, RedisTransport)
    assert transport.url == "redis://127.0.0.1:6379/3"


def test_open_transport_rejects_an_unknown_scheme() -> None:
    with pytest.raises(ValueError, match="unsupported transport url"):
        open_transport("kafka://x")
