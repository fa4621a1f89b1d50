"""What only the SQLite store promises: its migrations, its lifecycle, several processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane.admission import lane
from runlane.errors import (
    ConcurrencyLimitError,
    LeaseLostError,
    RunlaneError,
    StoreUnavailableError,
)
from runlane.models import (
    Lease,
    QuotaGate,
    RateGate,
    RetryTimer,
    RunCursor,
    RunQuery,
    RunSpec,
    RunStatus,
    Settlement,
    Writes,
    run_from_spec,
    settled_run,
)
from runlane.stores import open_store
from runlane.stores.migrations import migrations, pending_migrations
from runlane.stores.sqlite import reads
from runlane.stores.sqlite.rows import changed_columns
from runlane.stores.sqlite.statements import SQL
from runlane.stores.sqlite.store import SqliteStore, _configure
from runlane.stores.sqlite.worker import BATCH, SqliteWorker

from ..races import race_starts

T0 = datetime(2026, 1, 1, tzinfo=UTC)

NO_WAIT = RetryTimer(0.0, 0.0)  # a denied waiter is due again at once


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


async def test_the_due_schedules_query_searches_the_due_index(tmp_path: Path) -> None:
    # The firing pass asks for the due schedules on every tick of every engine: never a scan.
    path = tmp_path / "plan.db"
    await open_and_close(path)
    with sqlite3.connect(path) as conn:
        for workflows in (None, '["report", "sync"]'):
            query = f"EXPLAIN QUERY PLAN {SQL['due_schedules']}"
            rows = conn.execute(query, (T0.isoformat(), workflows, 500))
            plan = " | ".join(str(row[-1]) for row in rows)
            assert "USING INDEX schedules_due" in plan, plan


@pytest.mark.parametrize(
    ("statement", "index"),
    [("created_activity", "runs_newest"), ("settled_activity", "runs_terminal")],
)
async def test_the_overviews_reads_search_their_indexes(
    tmp_path: Path, statement: str, index: str
) -> None:
    path = tmp_path / "plan.db"
    await open_and_close(path)
    span = (T0.isoformat(), (T0 + timedelta(hours=1)).isoformat())
    for namespace in (None, "eu"):  # every namespace's runs, or one's (a fenced engine's)
        with sqlite3.connect(path) as conn:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {SQL[statement]}", (*span, namespace))
            plan = " | ".join(str(row[-1]) for row in rows)
        assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, plan


@pytest.mark.parametrize(
    ("statement", "params", "wanted"),
    [
        # The overview: each lane's active runs from runs_singleton_active alone (it covers
        # them), in its order, so the running counts need no sort, no table lookup and no
        # finished run; the quota keys from runs_concurrency.
        ("lane_members", (None, None), "COVERING INDEX runs_singleton_active (singleton_key>?)"),
        ("lane_members", ("eu", "k"), "COVERING INDEX runs_singleton_active (singleton_key>?)"),
        ("lane_members_of_quotas", (None, None), "INDEX runs_concurrency (concurrency_key>?)"),
        ("lane_runs_of_key", ("k", "k"), "INDEX runs_singleton_active (singleton_key=?)"),
        ("next_waiters", ("k", T0.isoformat(), 1, "k"), "INDEX runs_singleton_active"),
    ],
)
async def test_the_lanes_are_read_from_the_active_runs_index(
    tmp_path: Path, statement: str, params: tuple[object, ...], wanted: str
) -> None:
    path = tmp_path / "plan.db"
    await open_and_close(path)
    with sqlite3.connect(path) as conn:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {SQL[statement]}", params)
        plan = " | ".join(str(row[-1]) for row in rows)
    assert wanted in plan, plan
    assert "SCAN runs " not in plan + " ", plan
    if statement == "lane_members":
        assert "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize(
    "query",
    [
        RunQuery(attributes={"customer": "acme"}),
        RunQuery(attributes={"customer": "acme"}, after=RunCursor(T0, "run-7")),
        RunQuery(
            attributes={"customer": "acme", "tier": 2},
            workflow="wf",
            namespace="eu",
            created_from=T0 - timedelta(days=1),
            after=RunCursor(T0, "run-7"),
        ),
    ],
    ids=["first-page", "from-a-cursor", "two-attributes-and-filters"],
)
async def test_a_page_by_attributes_walks_the_first_ones_index_newest_first(
    tmp_path: Path, query: RunQuery
) -> None:
    # From the cursor, newest first, in the order of attribute_runs_newest: a page stops at
    # its 50th run, never sorting every run of the value (as the (key, value) index made it),
    # whatever else the filter asks.
    path = tmp_path / "plan.db"
    await open_and_close(path)
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        assert reads.page_runs(conn, query, 50) == []
        conn.set_trace_callback(None)
        rows = conn.execute(f"EXPLAIN QUERY PLAN {seen[-1]}").fetchall()
    plan = " | ".join(str(row[-1]) for row in rows)
    walk = "SEARCH a USING COVERING INDEX attribute_runs_newest (key=? AND value=?"
    assert plan.startswith(walk), plan
    assert ("(created_at,run_id)<(?,?)" in plan) == (query.after is not None), plan
    assert "TEMP B-TREE" not in plan and "SCAN runs" not in plan, plan


async def test_the_attribute_index_follows_every_write_of_the_runs(tmp_path: Path) -> None:
    # attribute_runs follows the column: a start, a merge (a name set again replaced), a prune;
    # each row with its run's created_at.
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    try:
        spec = RunSpec("a", "wf", "1", None, T0, attributes={"k": "v", "flag": True, "n": 2})
        [started] = await store.create_runs([spec], T0, lease=Lease("o", T0 + timedelta(60)))
        assert started.claim is not None
        await store.create_runs([RunSpec("b", "wf", "1", None, T0)], T0)
        await store.set_attributes("a", "o", Writes(), {"k": "w", "x": 0.5}, T0 + timedelta(1))
        with sqlite3.connect(tmp_path / "x.db") as conn:
            rows = conn.execute(
                "SELECT run_id, key, value, created_at FROM attribute_runs ORDER BY key"
            )
            at = T0.isoformat(timespec="microseconds")
            assert rows.fetchall() == [
                ("a", "flag", b"\x01", at),
                ("a", "k", "w", at),
                ("a", "n", 2, at),
                ("a", "x", 0.5, at),
            ]
        await store.settle_run("a", "o", Writes(), Settlement(RunStatus.COMPLETED), T0)
        assert await store.prune_runs({RunStatus.COMPLETED: T0 + timedelta(1)}, 10) == ["a"]
        with sqlite3.connect(tmp_path / "x.db") as conn:
            assert conn.execute("SELECT count(*) FROM attribute_runs").fetchone() == (0,)
    finally:
        await store.close()


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


# ---------------------------------------------------------------- group commit


def spec(run_id: str, input: Any = None, quota: QuotaGate | None = None) -> RunSpec:
    return RunSpec(run_id, "wf", "1", input, T0, quota=quota)


@contextlib.asynccontextmanager
async def one_batch(store: SqliteStore) -> AsyncIterator[list[str]]:
    """Hold the store's worker thread, so the calls queued meanwhile are taken as one batch.

    Yields the statements the worker runs from then on.
    """
    statements: list[str] = []
    worker = store._worker
    assert worker is not None
    await worker.run(lambda conn: conn.set_trace_callback(statements.append), write=False)
    entered, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(timeout=30)

    held = asyncio.ensure_future(worker._put(hold, write=False))  # on the thread, not inline
    await asyncio.to_thread(entered.wait, 30)
    try:
        yield statements
        # The calls made meanwhile wait for the loop's next pass; let it come while the worker
        # is still held, so they are queued behind the held call (not run on this thread once
        # the worker is free).
        for _ in range(3):
            await asyncio.sleep(0)
    finally:
        release.set()
        await held


async def opened_with_worker(path: Path) -> tuple[SqliteStore, SqliteWorker]:
    """An open store on ``path`` and its worker (to queue jobs on it directly)."""
    store = SqliteStore(path)
    await store.open()
    assert store._worker is not None
    return store, store._worker


async def queued(*calls: Awaitable[Any]) -> list[asyncio.Future[Any]]:
    """Start ``calls`` and let each one queue its job (they wait for their answers)."""
    futures: list[asyncio.Future[Any]] = [asyncio.ensure_future(call) for call in calls]
    await asyncio.sleep(0)
    return futures


async def answers(futures: list[asyncio.Future[Any]]) -> list[Any]:
    return await asyncio.gather(*futures, return_exceptions=True)


async def test_reads_batched_with_writes_on_a_write_locked_file_still_answer(
    tmp_path: Path,
) -> None:
    """Another process holds the write lock past the busy timeout: the writes of a batch fail
    (the store is unavailable), its reads answer (a WAL reader never waits for a writer)."""
    store = SqliteStore(tmp_path / "x.db", busy_timeout=0.1)
    await store.open()
    await store.create_runs([spec("there")], T0)
    other = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        async with one_batch(store):
            futures = await queued(store.get_run("there"), store.create_runs([spec("new")], T0))
        read, write = await answers(futures)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert read is not None and read.id == "there"
    assert isinstance(write, StoreUnavailableError)
    assert (await store.create_runs([spec("new")], T0))[0].created  # once the lock is gone
    await store.close()


async def test_a_failing_call_in_a_batch_leaves_the_others_committed(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    await store.create_runs([spec("leased"), spec("full", quota=QuotaGate("q", 1))], T0)
    await store.claim_run("leased", "me", T0, T0 + timedelta(minutes=5), singleton_retry=NO_WAIT)
    async with one_batch(store) as statements:
        futures = await queued(
            store.create_runs([spec("a")], T0),
            store.create_runs([spec("half"), spec("bad", input=object())], T0),
            store.checkpoint("leased", "someone-else", Writes(), T0),
            store.create_runs([spec("refused", quota=QuotaGate("q", 1))], T0),
            store.create_runs([spec("b")], T0),
        )
    created_a, half, lease_lost, refused, created_b = await answers(futures)
    # tried without savepoints, rolled back at the first failing job, then run with them
    assert statements.count("BEGIN IMMEDIATE") == 2, statements
    assert statements.count("ROLLBACK") == 1 and statements.count("COMMIT") == 1, statements
    assert created_a[0].created and created_b[0].created
    assert isinstance(half, TypeError)
    assert isinstance(lease_lost, LeaseLostError)
    assert isinstance(refused[0].rejected, ConcurrencyLimitError)
    runs = await store.get_runs(["a", "b", "half", "bad", "refused"])
    await store.close()
    assert sorted(runs) == ["a", "b"]


async def test_a_batch_where_nothing_fails_runs_in_one_transaction_without_savepoints(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    await store.create_runs([spec("there")], T0)
    async with one_batch(store) as statements:
        futures = await queued(
            store.create_runs([spec("a")], T0),
            store.get_run("there"),
            store.create_runs([spec("b")], T0),
        )
    created_a, read, created_b = await answers(futures)
    assert created_a[0].created and read.id == "there" and created_b[0].created
    assert statements.count("BEGIN IMMEDIATE") == statements.count("COMMIT") == 1, statements
    assert not any("SAVEPOINT" in s for s in statements), statements
    assert sorted(await store.get_runs(["a", "b"])) == ["a", "b"]
    await store.close()


async def test_a_batchs_only_write_run_last_fails_alone_without_a_second_try(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    await store.create_runs([spec("a")], T0)

    async with one_batch(store) as statements:
        futures = await queued(
            store.get_run("a"), store.create_runs([spec("half"), spec("bad", input=object())], T0)
        )
    read, half = await answers(futures)
    assert read.id == "a" and isinstance(half, TypeError)
    assert statements.count("BEGIN IMMEDIATE") == statements.count("ROLLBACK") == 1, statements
    assert "COMMIT" not in statements, statements
    assert await store.get_runs(["half", "bad"]) == {}
    assert (await store.create_runs([spec("half")], T0))[0].created  # the store goes on
    await store.close()


async def test_if_the_batch_commit_fails_every_call_of_the_batch_gets_the_error(
    tmp_path: Path,
) -> None:
    store, worker = await opened_with_worker(tmp_path / "x.db")

    def orphan_step_checked_at_commit(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute(
            "INSERT INTO steps (run_id, seq, name, kind, status, attempts)"
            " VALUES ('nobody', 0, 's', 'step', 'completed', 1)"
        )

    async with one_batch(store):
        futures = await queued(
            store.create_runs([spec("a")], T0),
            worker.run(orphan_step_checked_at_commit, write=True),
        )
    created, orphan = await answers(futures)
    assert isinstance(created, sqlite3.IntegrityError)
    assert isinstance(orphan, sqlite3.IntegrityError)
    assert await store.get_run("a") is None
    assert (await store.create_runs([spec("a")], T0))[0].created
    await store.close()


async def test_many_concurrent_calls_are_each_answered_with_their_own_result(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    ids = [f"run-{n:03}" for n in range(600)]
    created = await asyncio.gather(*(store.create_runs([spec(i, input=i)], T0) for i in ids))
    read = await asyncio.gather(*(store.get_run(i) for i in reversed(ids)))
    await store.close()
    assert [s[0].run.id for s in created if s[0].run is not None] == ids
    assert [run.input for run in read if run is not None] == ids[::-1]


async def test_a_calls_answer_means_its_batch_is_committed_for_other_connections(
    tmp_path: Path,
) -> None:
    writer, reader = SqliteStore(tmp_path / "x.db"), SqliteStore(tmp_path / "x.db")
    await writer.open()
    await reader.open()
    ids = [f"run-{n:03}" for n in range(300)]
    seen: list[bool] = []

    async def create_then_look(run_id: str) -> None:
        await writer.create_runs([spec(run_id)], T0)
        seen.append(await reader.get_run(run_id) is not None)

    await asyncio.gather(*(create_then_look(i) for i in ids))
    await writer.close()
    await reader.close()
    assert seen == [True] * len(ids)


async def test_a_call_cancelled_before_its_batch_is_taken_does_not_run(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    async with one_batch(store):
        (cancelled,) = await queued(store.create_runs([spec("a")], T0))
        cancelled.cancel()
        (kept,) = await queued(store.create_runs([spec("b")], T0))
    await kept
    assert await store.get_run("a") is None
    assert await store.get_run("b") is not None
    await store.close()


async def test_closing_answers_every_call_queued_before_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    futures = await queued(*(store.create_runs([spec(f"run-{n}")], T0) for n in range(20)))
    await store.close()
    assert all(started[0].created for started in await answers(futures))
    with pytest.raises(RunlaneError, match="not open"):
        await store.get_run("run-0")


async def test_a_lone_call_runs_at_once_on_the_callers_thread_a_later_one_waits_its_turn(
    tmp_path: Path,
) -> None:
    store, worker = await opened_with_worker(tmp_path / "x.db")
    here = threading.get_ident()
    assert await worker.run(lambda conn: threading.get_ident(), write=True) == here
    assert await worker.run(lambda conn: threading.get_ident(), write=False) == here
    order: list[tuple[str, int]] = []

    def note(name: str) -> Any:
        return lambda conn: order.append((name, threading.get_ident()))

    async with one_batch(store):  # a call is queued: the next ones queue behind it, in order
        futures = await queued(
            worker.run(note("a"), write=True), worker.run(note("b"), write=False)
        )
    await answers(futures)
    assert [name for name, _ in order] == ["a", "b"]
    assert all(thread != here for _, thread in order)
    await store.close()


async def test_calls_made_together_batch_on_the_callers_thread_in_few_transactions(
    tmp_path: Path,
) -> None:
    """Other tasks are ready when the first call is made: it waits for the loop's next pass,
    and the calls the others make meanwhile join its batch (one commit for many), run on the
    caller's thread: no hop to the worker and back."""
    store, worker = await opened_with_worker(tmp_path / "x.db")
    statements: list[str] = []
    await worker._put(lambda conn: conn.set_trace_callback(statements.append), write=False)
    here = threading.get_ident()
    threads: list[int] = []

    async def start(n: int) -> None:
        await store.create_runs([spec(f"run-{n}")], T0)
        threads.append(await worker.run(lambda conn: threading.get_ident(), write=False))

    await asyncio.gather(*(start(n) for n in range(50)))
    await store.close()
    assert statements.count("COMMIT") < 10, statements.count("COMMIT")
    assert set(threads) == {here}
    assert len(threads) == 50


async def test_a_pending_batch_past_its_size_goes_on_in_order_on_the_worker(
    tmp_path: Path,
) -> None:
    """A loop batch takes at most ``BATCH`` calls; the next call hands the pending ones to the
    worker, then queues behind them: every call is answered, in the order made."""
    store, worker = await opened_with_worker(tmp_path / "x.db")
    order: list[int] = []

    def note(n: int) -> Any:
        return lambda conn: order.append(n)

    count = BATCH + 40
    futures = await queued(*(worker.run(note(n), write=True) for n in range(count)))
    await answers(futures)
    await store.close()
    assert order == list(range(count))


async def test_calls_from_two_event_loops_batch_each_on_its_own_loop(tmp_path: Path) -> None:
    """A store used from a second loop on another thread (as a remote body's own loop may):
    each loop's pending calls run as its own batches, none is lost or answered twice."""
    store, worker = await opened_with_worker(tmp_path / "x.db")
    loop = asyncio.get_running_loop()

    async def make(prefix: str) -> list[bool]:
        async def one(n: int) -> bool:
            await asyncio.sleep(0)
            return (await store.create_runs([spec(f"{prefix}-{n}")], T0))[0].created

        return list(await asyncio.gather(*(one(n) for n in range(200))))

    def other_thread() -> list[bool]:
        return asyncio.run(make("other"))

    here, there = await asyncio.gather(make("here"), asyncio.to_thread(other_thread))
    assert here == [True] * 200 and there == [True] * 200
    assert asyncio.get_running_loop() is loop
    runs = await store.get_runs([f"{p}-{n}" for p in ("here", "other") for n in range(200)])
    assert len(runs) == 400
    assert not worker._pending
    await store.close()


async def test_a_pending_call_cancelled_before_its_batch_runs_does_not_run(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "x.db")
    await store.open()
    cancelled, kept = await queued(
        store.create_runs([spec("a")], T0), store.create_runs([spec("b")], T0)
    )
    assert not cancelled.done()  # pending in the loop's batch
    cancelled.cancel()
    await kept
    assert await store.get_run("a") is None
    assert await store.get_run("b") is not None
    await store.close()


async def test_a_pending_batch_on_a_write_locked_file_waits_on_the_worker_not_the_loop(
    tmp_path: Path,
) -> None:
    """Run on the caller's thread, the batch would stall the event loop for the busy timeout:
    its BEGIN fails fast there, its writes go to the worker, which waits for the lock; its
    reads are answered at once (a WAL reader never waits for a writer)."""
    store = SqliteStore(tmp_path / "x.db", busy_timeout=10)
    await store.open()
    await store.create_runs([spec("there")], T0)
    other = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        *writes, read = await queued(
            *(store.create_runs([spec(f"run-{n}")], T0) for n in range(5)),
            store.get_run("there"),
        )
        t0 = asyncio.get_running_loop().time()
        for _ in range(10):
            await asyncio.sleep(0.01)
        assert asyncio.get_running_loop().time() - t0 < 2  # the loop was never stalled
        assert read.done() and (await read) is not None
        assert not any(write.done() for write in writes), [w for w in writes if w.done()]
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert all(started[0].created for started in await answers(writes))
    await store.close()


async def test_a_lone_write_to_a_file_another_connection_locks_waits_on_the_worker(
    tmp_path: Path,
) -> None:
    """Run on the caller's thread, it would stall the event loop for the busy timeout: it
    fails fast there, and the worker's thread waits for the lock instead."""
    store = SqliteStore(tmp_path / "x.db", busy_timeout=10)
    await store.open()
    other = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        write = asyncio.ensure_future(store.create_runs([spec("b")], T0))
        t0 = asyncio.get_running_loop().time()
        for _ in range(10):
            await asyncio.sleep(0.01)
        assert asyncio.get_running_loop().time() - t0 < 2  # the loop was never stalled
        assert not write.done()
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert (await write)[0].created
    assert (await store.create_runs([spec("c")], T0))[0].created  # on the caller's thread again
    await store.close()


# ---------------------------------------------------------------- several processes


def _claim_every_pending_run(
    path: str, owner: str, together: bool, barrier: Any, results: Any
) -> None:
    """In a spawned process: try to claim every pending run, report the ones won.

    ``together``: all claims at once (group-committed in batches), else one after another.
    """

    async def main() -> list[str]:
        store = SqliteStore(path)
        await store.open()
        try:
            ids = await store.pending_run_ids(T0, 1000, None)
            barrier.wait(timeout=60)
            claims = [
                store.claim_run(
                    run_id, owner, T0, T0 + timedelta(minutes=5), singleton_retry=NO_WAIT
                )
                for run_id in ids
            ]
            if together:
                outcomes = await asyncio.gather(*claims)
            else:
                outcomes = [await claim for claim in claims]
            return [run_id for run_id, o in zip(ids, outcomes, strict=True) if o.claim is not None]
        finally:
            await store.close()

    results.put((owner, asyncio.run(main())))


@pytest.mark.slow
@pytest.mark.parametrize("together", [False, True], ids=["one-by-one", "all-at-once"])
async def test_two_processes_claiming_the_same_runs_never_both_claim_one(
    tmp_path: Path, together: bool
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
        ctx.Process(target=_claim_every_pending_run, args=(path, owner, together, barrier, results))
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


@pytest.mark.slow
async def test_200_starts_from_4_processes_against_a_rate_limit_of_10_admit_exactly_10(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    await open_and_close(path)  # migrated once, before the race
    rate = RateGate("2:wf:tenant:race", 10, 3600.0, user_key="tenant:race")
    outcomes = race_starts(f"sqlite:///{path}", {"rate": rate})
    admitted = sorted(run_id for run_id, created, _ in outcomes if created)
    assert len(admitted) == 10, admitted
    assert {refusal for _, created, refusal in outcomes if not created} == {"RateLimitError"}
    store = SqliteStore(path)
    await store.open()
    try:
        assert sorted(run.id for run in await store.list_runs(limit=1000)) == admitted
    finally:
        await store.close()


async def test_a_worker_that_cannot_connect_reports_why_however_fast_it_fails() -> None:
    def refuse() -> sqlite3.Connection:
        raise RunlaneError("no database here")

    # The thread may fail before start() has queued anything; the caller still learns why.
    for _ in range(50):
        with pytest.raises(RunlaneError, match="no database here"):
            await SqliteWorker(refuse, name="refusing").start()


def _configure_at_once(path: str, barrier: Any, results: Any) -> None:
    """In a forked process: set up a connection to ``path`` (as a store's open does, minus
    the thread hop, whose jitter would keep the processes from meeting) when the others do."""
    barrier.wait(timeout=30)
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        _configure(conn, 30.0)
        conn.execute("CREATE TABLE IF NOT EXISTS t (a)")
        conn.close()
        results.put("ok")
    except Exception as error:
        results.put(repr(error))


@pytest.mark.slow
def test_processes_opening_a_new_file_at_once_all_switch_it_to_wal(tmp_path: Path) -> None:
    # Switching a new file to WAL mode can be refused at once ("database is locked", whatever
    # the busy timeout) while another process switches it: about one trial in ten failed so.
    ctx = multiprocessing.get_context("fork")
    for trial in range(20):
        path = str(tmp_path / f"new-{trial}.db")
        barrier, results = ctx.Barrier(6), ctx.Queue()
        procs = [
            ctx.Process(target=_configure_at_once, args=(path, barrier, results)) for _ in range(6)
        ]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
        assert outcomes == ["ok"] * 6, (trial, outcomes)
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


# ---------------------------------------------------------------- migration 3: lanes


async def test_the_lanes_migration_moves_existing_singleton_runs_into_their_workflows_lane(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        for version, sql in migrations("sqlite")[:2]:
            conn.executescript(sql)
            conn.execute(
                "INSERT INTO schema_version VALUES (?, ?)", (version, "2026-01-01T00:00:00+00:00")
            )
        stamp = "2026-01-01T00:00:00.000000+00:00"
        for run_id, workflow, key, quota in [
            ("holder", "sync", "store:A", None),
            ("other", "report", "store:A", None),
            ("q", "job", None, "tenant:acme"),
        ]:
            conn.execute(
                "INSERT INTO runs (id, workflow, version, status, tags, created_at, updated_at,"
                " singleton_key, singleton_limit, holds_slot, concurrency_key)"
                " VALUES (?, ?, '1', 'suspended', '[\"mine\"]', ?, ?, ?, 1, ?, ?)",
                (run_id, workflow, stamp, stamp, key, int(key is not None), quota),
            )
    store = SqliteStore(path)
    await store.open()
    try:
        holder, other, q = [await store.get_run(i) for i in ("holder", "other", "q")]
    finally:
        await store.close()
    assert holder is not None and other is not None and q is not None
    # The lanes new starts of those workflows compete in (so they queue behind the holder).
    assert holder.singleton_key == lane("workflow", "sync", "store:A") == "4:sync:store:A"
    assert other.singleton_key == lane("workflow", "report", "store:A")
    assert holder.tags == ("mine", "singleton:store:A")
    assert q.tags == ("mine", "concurrency:tenant:acme")
    assert (q.concurrency_limit, holder.admission_retries) == (None, 0)


# ---------------------------------------------------------------- migration 21: attribute pages


async def test_the_attribute_pages_migration_dates_the_attributes_of_the_runs_it_finds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    runs = {"old": {"customer": "acme", "vip": True}, "new": {"customer": "acme"}, "plain": {}}
    with sqlite3.connect(path) as conn:
        for version, sql in migrations("sqlite")[:19]:
            conn.executescript(sql)
            conn.execute(
                "INSERT INTO schema_version VALUES (?, ?)", (version, "2026-01-01T00:00:00+00:00")
            )
        for n, (run_id, attributes) in enumerate(runs.items()):
            stamp = (T0 + timedelta(seconds=n)).isoformat(timespec="microseconds")
            conn.execute(
                "INSERT INTO runs (id, workflow, version, status, tags, created_at, updated_at,"
                " attributes) VALUES (?, 'wf', '1', 'pending', '[]', ?, ?, ?)",
                (run_id, stamp, stamp, json.dumps(attributes) if attributes else None),
            )
            # As version 19 indexed a run's attributes (index_attributes, then).
            conn.execute(
                "INSERT INTO run_attributes (run_id, key, value) SELECT ?, key,"
                " CASE type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' ELSE atom END"
                " FROM json_each(?)",
                (run_id, json.dumps(attributes)),
            )
    store = SqliteStore(path)
    await store.open()
    try:
        acme = [run.id for run in await store.list_runs(attributes={"customer": "acme"})]
        vip = [run.id for run in await store.list_runs(attributes={"vip": True})]
    finally:
        await store.close()
    assert (acme, vip) == (["new", "old"], ["old"])
    with sqlite3.connect(path) as conn:
        dated = conn.execute(
            "SELECT count(*) FROM attribute_runs AS a JOIN runs AS r ON r.id = a.run_id"
            " WHERE a.created_at = r.created_at"
        )
        assert dated.fetchone() == (3,)


async def test_an_engine_of_the_previous_version_uses_run_attributes_as_it_was(
    tmp_path: Path,
) -> None:
    # Its statements (version 19's, verbatim) write a run's attributes without created_at, after
    # the run; find runs by them; delete them with the run. Through the view of migration 0021
    # they land in attribute_runs, dated, where this version finds them.
    path = tmp_path / "x.db"
    await open_and_close(path)
    value = "CASE type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' ELSE atom END"
    old_index = (
        f"INSERT OR REPLACE INTO run_attributes (run_id, key, value) SELECT ?, key, {value}"
        " FROM json_each(?)"
    )
    old_filter = (
        "SELECT id FROM runs WHERE id IN (SELECT run_id FROM run_attributes"
        f" WHERE key = ? AND value = (SELECT {value} FROM json_each(?)))"
    )
    stamp = T0.isoformat(timespec="microseconds")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO runs (id, workflow, version, status, tags, created_at, updated_at,"
            " attributes) VALUES ('old', 'wf', '1', 'pending', '[]', ?, ?, ?)",
            (stamp, stamp, '{"customer": "acme", "stage": "new"}'),
        )
        conn.execute(old_index, ("old", '{"customer": "acme", "stage": "new"}'))
        conn.execute(
            "UPDATE runs SET attributes = ? WHERE id = 'old'",
            ('{"customer": "acme", "stage": "paid"}',),
        )
        conn.execute(old_index, ("old", '{"stage": "paid"}'))
        rows = conn.execute("SELECT key, value, created_at FROM attribute_runs ORDER BY key")
        assert rows.fetchall() == [("customer", "acme", stamp), ("stage", "paid", stamp)]
        assert conn.execute(old_filter, ("stage", '"paid"')).fetchall() == [("old",)]
    store = SqliteStore(path)
    await store.open()
    try:
        paid = await store.page_runs(RunQuery(attributes={"customer": "acme", "stage": "paid"}), 5)
        assert [run.id for run in paid] == ["old"]
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "DELETE FROM run_attributes WHERE run_id IN (SELECT value FROM json_each(?))",
            ('["old"]',),
        )
        assert conn.execute("SELECT count(*) FROM attribute_runs").fetchone() == (0,)


# ---------------------------------------------------------------- WAL checkpoints


class _Counting(sqlite3.Connection):
    checkpoints: list[tuple[int, int, int]]

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = super().execute(sql, *args)
        if "wal_checkpoint" in sql:
            rows = cursor.fetchall()
            self.checkpoints.append(rows[0])
        return cursor


@contextlib.asynccontextmanager
async def _counted(path: Path) -> AsyncIterator[tuple[SqliteStore, list[tuple[int, int, int]]]]:
    """An open store on ``path`` whose checkpoint thread records each checkpoint's result."""
    done: list[tuple[int, int, int]] = []

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, factory=_Counting)
        conn.checkpoints = done
        return conn

    store = SqliteStore(path)
    store._checkpoint_connect = connect  # type: ignore[method-assign]
    await store.open()
    try:
        assert store._checkpointer is not None
        yield store, done
    finally:
        await store.close()


async def _until(done: list[Any], count: int) -> None:
    for _ in range(100):
        if len(done) >= count:
            return
        await asyncio.sleep(0.02)


async def test_commits_leave_the_wal_to_the_checkpoint_thread(tmp_path: Path) -> None:
    async with _counted(tmp_path / "r.db") as (store, done):
        assert store._checkpointer is not None
        store._checkpointer._every = 20
        [pages] = await store._running().run(
            lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone(), write=False
        )
        assert pages == 20_000  # a commit checkpoints only past that: the thread does it
        for i in range(100):
            await store.create_runs([RunSpec(f"r{i}", "wf", "1", {"i": i}, T0)], T0)
        await _until(done, 4)
        # one per 20 write batches; fewer on a busy machine, where the commits outpace the
        # thread (those made during a checkpoint count towards the next), never only the idle one
        assert len(done) >= 2
        assert all(busy == 0 and log >= copied >= 0 for busy, log, copied in done)
        assert sum(copied for *_, copied in done) > 0
    reopened = SqliteStore(tmp_path / "r.db")
    await reopened.open()
    try:
        assert len(await reopened.get_runs([f"r{i}" for i in range(100)])) == 100
    finally:
        await reopened.close()


async def test_a_lone_write_is_checkpointed_once_the_file_is_idle(tmp_path: Path) -> None:
    async with _counted(tmp_path / "r.db") as (store, done):
        assert store._checkpointer is not None
        store._checkpointer._idle = 0.05
        await store.create_runs([RunSpec("one", "wf", "1", None, T0)], T0)
        await _until(done, 1)
        assert len(done) == 1 and done[0][2] > 0
        await asyncio.sleep(0.2)
        assert len(done) == 1  # nothing written since: nothing to do


async def test_a_store_in_memory_runs_no_checkpoint_thread() -> None:
    store = SqliteStore(":memory:")
    await store.open()
    try:
        assert store._checkpointer is None
        await store.create_runs([RunSpec("one", "wf", "1", None, T0)], T0)
    finally:
        await store.close()


def test_a_settlement_writes_only_the_columns_it_changes() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    run = run_from_spec(RunSpec("a", "wf", "1", {"n": 1}, t0))
    done = settled_run(run, Settlement(RunStatus.COMPLETED, True), t0 + timedelta(seconds=1))
    names, values = changed_columns(done, run)
    assert dict(zip(names, values, strict=True)) == {
        "status": "completed",
        "output": "true",
        "updated_at": "2026-01-01T00:00:01.000000+00:00",
    }
    # A JSON document is compared by identity, not equality: True == 1, yet it must be written.
    again = settled_run(done, Settlement(RunStatus.COMPLETED, 1), t0 + timedelta(seconds=1))
    assert changed_columns(again, done) == (("output",), ["1"])
    assert changed_columns(done, done) == ((), [])
