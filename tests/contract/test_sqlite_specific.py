"""What only the SQLite store promises: its migrations, its lifecycle, several processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane.errors import RunlaneError
from runlane.models import RunSpec
from runlane.stores import open_store
from runlane.stores.migrations import migrations, pending_migrations
from runlane.stores.sqlite import SqliteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def schema(path: Path) -> set[tuple[str, str, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    return {tuple(row) for row in rows}


async def open_and_close(path: Path) -> None:
    store = SqliteStore(path)
    await store.open()
    await store.close()


# ---------------------------------------------------------------- migrations


def test_migrations_are_numbered_from_one_in_order() -> None:
    versions = [version for version, _ in migrations("sqlite")]
    assert versions == list(range(1, len(versions) + 1))
    assert pending_migrations("sqlite", versions[-1]) == []
    assert pending_migrations("sqlite", 0) == migrations("sqlite")


async def test_applying_the_migrations_by_hand_reproduces_the_schema_a_store_creates(
    tmp_path: Path,
) -> None:
    by_hand = tmp_path / "by_hand.db"
    with sqlite3.connect(by_hand) as conn:
        for _, sql in migrations("sqlite"):
            conn.executescript(sql)
    await open_and_close(tmp_path / "opened.db")
    assert schema(by_hand) == schema(tmp_path / "opened.db")
    assert any(name == "runs" for _, name, _, _ in schema(by_hand))


async def test_opening_records_the_latest_schema_version(tmp_path: Path) -> None:
    await open_and_close(tmp_path / "x.db")
    await open_and_close(tmp_path / "x.db")
    with sqlite3.connect(tmp_path / "x.db") as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
    assert versions == [version for version, _ in migrations("sqlite")]


async def test_a_database_with_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    await open_and_close(path)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version VALUES (9999, '2099-01-01T00:00:00+00:00')")
    store = SqliteStore(path)
    with pytest.raises(RunlaneError, match=r"schema version 9999.*upgrade runlane"):
        await store.open()
    with pytest.raises(RunlaneError, match="not open"):
        await store.get_run("a")


# ---------------------------------------------------------------- lifecycle


async def test_opens_are_counted_and_the_last_close_really_closes(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    await store.open()
    await store.close()
    assert await store.get_run("a") is None
    await store.close()
    with pytest.raises(RunlaneError, match="not open"):
        await store.get_run("a")
    await store.close()


async def test_a_closed_store_opens_again(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    await store.create_runs([RunSpec("a", "wf", "1", None, T0)], T0)
    await store.close()
    await store.open()
    try:
        assert await store.get_run("a") is not None
    finally:
        await store.close()


async def test_two_store_objects_on_one_file_see_each_other_writes(tmp_path: Path) -> None:
    first, second = SqliteStore(tmp_path / "x.db"), SqliteStore(tmp_path / "x.db")
    await first.open()
    await second.open()
    try:
        await first.create_runs([RunSpec("a", "wf", "1", None, T0)], T0)
        assert await second.pending_run_ids(T0, 10, None) == ["a"]
    finally:
        await first.close()
        await second.close()


def test_urls_follow_the_sqlalchemy_convention(tmp_path: Path) -> None:
    assert SqliteStore.from_url("sqlite:///relative/x.db").path == "relative/x.db"
    assert SqliteStore.from_url(f"sqlite:///{tmp_path}/x.db").path == f"{tmp_path}/x.db"
    assert isinstance(open_store(f"sqlite:///{tmp_path}/x.db"), SqliteStore)
    for url in ("sqlite:///", "sqlite://x.db", "postgresql://x"):
        with pytest.raises(ValueError):
            SqliteStore.from_url(url)


# ---------------------------------------------------------------- several processes


def _claim_every_pending_run(path: str, owner: str, barrier: Any, results: Any) -> None:
    """In a spawned process: try to claim every pending run, report the ones won."""

    async def main() -> list[str]:
        store = SqliteStore(path)
        await store.open()
        try:
            ids = await store.pending_run_ids(T0, 1000, None)
            barrier.wait(timeout=60)
            won = []
            for run_id in ids:
                outcome = await store.claim_run(
                    run_id, owner, T0, T0 + timedelta(minutes=5), singleton_retry_at=T0
                )
                if outcome.claim is not None:
                    won.append(run_id)
            return won
        finally:
            await store.close()

    results.put((owner, asyncio.run(main())))


@pytest.mark.slow
async def test_two_processes_claiming_the_same_runs_never_both_claim_one(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "shared.db")
    store = SqliteStore(path)
    await store.open()
    total = 200
    specs = [RunSpec(f"run-{n:03}", "wf", "1", None, T0) for n in range(total)]
    await store.create_runs(specs, T0)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(target=_claim_every_pending_run, args=(path, owner, barrier, results))
        for owner in ("p1", "p2")
    ]
    for proc in procs:
        proc.start()
    try:
        won = dict(results.get(timeout=90) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=30)
    assert set(won["p1"]).isdisjoint(won["p2"]), sorted(set(won["p1"]) & set(won["p2"]))
    assert sorted(won["p1"] + won["p2"]) == [spec.id for spec in specs]
    owners = {
        run.id: run.lease_owner for run in (await store.get_runs([s.id for s in specs])).values()
    }
    await store.close()
    assert all(owners[run_id] == "p1" for run_id in won["p1"])
    assert all(owners[run_id] == "p2" for run_id in won["p2"])
