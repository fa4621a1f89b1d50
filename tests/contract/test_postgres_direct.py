"""The PostgreSQL store's single statements on the libpq handle (``stores/postgres/direct.py``):
the same values, types and errors as through a psycopg cursor, on a real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from runlane.errors import StoreUnavailableError
from runlane.stores.postgres.db import SQL, Conn, Database
from runlane.stores.postgres.direct import Direct, numbered
from runlane.stores.postgres.rows import utc_conninfo

STATEMENTS = {
    "values": """SELECT %(text)s::text AS text, %(number)s::bigint + 1 AS number,
                        %(flag)s::boolean AS flag, %(moment)s::timestamptz AS moment,
                        %(span)s::interval AS span, %(doc)s::jsonb AS doc,
                        %(ids)s::text[] AS ids, %(text)s IS NULL AS missing""",
    "small": "SELECT pg_typeof(%(n)s)::text AS type, %(n)s + 1 AS next",
    "none": "SELECT 1 AS one WHERE false",
    "write": "CREATE TEMPORARY TABLE IF NOT EXISTS direct_t (id int PRIMARY KEY)",
    "insert": "INSERT INTO direct_t VALUES (%(id)s)",
    "divide": "SELECT 1 / %(d)s AS q",
    "sleep": "SELECT pg_sleep(%(s)s)",
    "pid": "SELECT pg_backend_pid() AS pid",
}


@pytest.fixture
async def conn(pg_url: str) -> AsyncIterator[Conn]:
    connection = await psycopg.AsyncConnection.connect(
        utc_conninfo(pg_url), autocommit=True, row_factory=dict_row
    )
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def db(pg_url: str) -> AsyncIterator[Database]:
    """A store's pool of one connection, open."""
    database = Database(pg_url, 1, 1)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


async def through_cursor(conn: Conn, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = await conn.execute(STATEMENTS[name], params)
    return await cur.fetchall() if cur.pgresult and cur.pgresult.nfields else []


def test_placeholders_are_numbered_once_per_name() -> None:
    statement = numbered("x", "SELECT %(a)s, %(b)s, %(a)s")
    assert statement.sql == b"SELECT $1, $2, $1"
    assert statement.order == ("a", "b")


def test_every_store_statement_has_only_named_placeholders() -> None:
    for name, sql in SQL.items():
        assert numbered(name, sql).sql.count(b"$") >= sql.count("%(")


def test_a_positional_placeholder_is_refused() -> None:
    with pytest.raises(ValueError, match="placeholder"):
        numbered("x", "SELECT %s")


async def test_values_read_back_exactly_as_through_a_cursor(conn: Conn) -> None:
    direct = Direct(STATEMENTS)
    params = {
        "text": 'it\'s "x"\\ é',
        "number": 2**40,
        "flag": True,
        "moment": datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        "span": timedelta(days=1, seconds=3, microseconds=5),
        "doc": '{"z": [1, 2.5, null, "\\u00e9"], "a": {}}',
        "ids": '{"a","b c","d\\"e"}',
    }
    for _ in range(3):  # the first execution prepares; later ones reuse the statement
        assert await direct.run(conn, "values", params) == await through_cursor(
            conn, "values", params
        )
    nulls = dict.fromkeys(params)
    assert await direct.run(conn, "values", nulls) == await through_cursor(conn, "values", nulls)


async def test_parameters_get_the_types_a_cursor_gives_them(conn: Conn) -> None:
    direct = Direct(STATEMENTS)
    for n in (1, 70_000, 2**40):  # smallint, integer, bigint: each prepared on its own
        assert await direct.run(conn, "small", {"n": n}) == await through_cursor(
            conn, "small", {"n": n}
        )
    assert await direct.run(conn, "none", {}) == []


async def test_a_refused_statement_raises_the_drivers_error_and_the_connection_stays_usable(
    conn: Conn,
) -> None:
    direct = Direct(STATEMENTS)
    with pytest.raises(psycopg.errors.DivisionByZero):  # refused at its first execution
        await direct.run(conn, "divide", {"d": 0})
    assert await direct.run(conn, "divide", {"d": 1}) == [{"q": 1}]
    with pytest.raises(psycopg.errors.DivisionByZero):  # and once prepared
        await direct.run(conn, "divide", {"d": 0})
    assert await direct.run(conn, "divide", {"d": 1}) == [{"q": 1}]
    await direct.run(conn, "write", {})
    await direct.run(conn, "insert", {"id": 1})
    with pytest.raises(psycopg.errors.UniqueViolation):
        await direct.run(conn, "insert", {"id": 1})
    assert not conn.closed
    assert (await conn.execute("SELECT 2 AS two")).pgresult is not None


async def test_statements_dropped_by_a_rollback_are_prepared_again(conn: Conn) -> None:
    direct = Direct(STATEMENTS)
    assert await direct.run(conn, "divide", {"d": 1}) == [{"q": 1}]
    # psycopg clears the connection's prepared statements after a rollback (DEALLOCATE ALL).
    with pytest.raises(psycopg.errors.DivisionByZero):
        async with conn.transaction():
            await conn.execute("SELECT 1 / 0")
    await conn.execute("DEALLOCATE ALL")
    assert await direct.run(conn, "divide", {"d": 1}) == [{"q": 1}]


async def test_plain_rows_are_the_rows_values_in_column_order_prepared_or_not(conn: Conn) -> None:
    direct = Direct(STATEMENTS)
    params = {"n": 41}
    # the first call prepares in a pipeline, the next ones send the prepared statement
    first = await direct.run_made(conn, "small", params, tuple)
    again = await direct.run_made(conn, "small", params, tuple)
    assert first == again == [("smallint", 42)]
    assert [tuple(r.values()) for r in await direct.run(conn, "small", params)] == first
    assert await direct.run_made(conn, "none", {}, tuple) == []
    await conn.execute("DEALLOCATE ALL")  # dropped under it: prepared again
    assert await direct.run_made(conn, "small", params, tuple) == first


async def test_a_call_cancelled_in_flight_closes_its_connection(conn: Conn) -> None:
    direct = Direct(STATEMENTS)
    call = asyncio.create_task(direct.run(conn, "sleep", {"s": 5}))
    await asyncio.sleep(0.3)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert conn.closed  # never handed on with a statement in flight


async def test_a_connection_lost_in_flight_raises_an_operational_error(
    conn: Conn, pg_url: str
) -> None:
    direct = Direct(STATEMENTS)
    [row] = await direct.run(conn, "pid", {})
    call = asyncio.create_task(direct.run(conn, "sleep", {"s": 5}))
    await asyncio.sleep(0.3)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", [row["pid"]])
    with pytest.raises(psycopg.OperationalError):
        await call
    assert conn.closed


async def test_a_pooled_connection_terminated_while_idle_is_replaced_at_checkout(
    db: Database, pg_url: str
) -> None:
    [row] = await db.rows("latest_event_seq")
    assert set(row) == {"seq"}
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
        await admin.execute(
            """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()"""
        )
    await asyncio.sleep(0.1)
    # A connection found dead at checkout is replaced without failing the call.
    assert [set(r) for r in await db.rows("latest_event_seq")] == [{"seq"}]


async def test_a_store_call_cancelled_in_flight_leaves_the_pool_a_working_connection(
    db: Database,
) -> None:
    direct = Direct(STATEMENTS)
    call = asyncio.create_task(db.run(lambda conn: direct.run(conn, "sleep", {"s": 5})))
    await asyncio.sleep(0.3)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert [set(r) for r in await asyncio.wait_for(db.rows("latest_event_seq"), 5)] == [{"seq"}]


async def test_a_refused_statement_is_the_callers_error_not_an_outage(db: Database) -> None:
    direct = Direct(STATEMENTS)
    with pytest.raises(psycopg.errors.DivisionByZero):
        await db.run(lambda conn: direct.run(conn, "divide", {"d": 0}))
    with pytest.raises(StoreUnavailableError):
        await db.run(lambda conn: _lost(conn, direct))


async def _lost(conn: Conn, direct: Direct) -> list[dict[str, Any]]:
    await conn.close()  # a connection that broke under the call
    return await direct.run(conn, "divide", {"d": 1})


async def test_a_pipeline_returns_each_statements_rows_and_prepares_each_once(conn: Conn) -> None:
    direct = Direct(STATEMENTS)
    calls = [("divide", {"d": 1}), ("none", {}), ("divide", {"d": 2}), ("small", {"n": 1})]
    expected = [[{"q": 1}], [], [{"q": 0}], [{"type": "smallint", "next": 2}]]
    assert await direct.pipeline(conn, calls) == expected  # prepared in it
    assert await direct.pipeline(conn, calls) == expected  # prepared before
    prepared = await conn.execute("SELECT count(*) AS n FROM pg_prepared_statements")
    assert await prepared.fetchone() == {"n": 3}


async def test_a_pipeline_that_fails_commits_nothing_and_raises_the_first_error(
    conn: Conn,
) -> None:
    direct = Direct(STATEMENTS)
    await direct.run(conn, "write", {})
    with pytest.raises(psycopg.errors.DivisionByZero):
        await direct.pipeline(conn, [("insert", {"id": 7}), ("divide", {"d": 0})])
    assert await direct.pipeline(conn, [("insert", {"id": 7}), ("divide", {"d": 1})]) == [
        [],
        [{"q": 1}],
    ]
    with pytest.raises(psycopg.errors.UniqueViolation):
        await direct.pipeline(conn, [("divide", {"d": 1}), ("insert", {"id": 7})])


async def test_a_statement_deallocated_inside_a_transaction_retries_the_transaction_whole(
    db: Database,
) -> None:
    direct, attempts = Direct(STATEMENTS), list[int]()

    async def work(conn: Conn) -> list[dict[str, Any]]:
        attempts.append(len(attempts) + 1)
        await direct.run(conn, "divide", {"d": 1})
        if len(attempts) == 1:
            await conn.execute("DEALLOCATE ALL")
        async with conn.transaction():
            return await direct.run(conn, "divide", {"d": 1})

    assert await db.run(work) == [{"q": 1}]
    assert attempts == [1, 2]
