"""PostgresStore's plumbing: a counted pool, units of work, named statements.

Pooled connections are in autocommit mode: a unit that is one statement (``Database.run``) is
atomic on its own and costs one round trip, with no BEGIN or COMMIT. Units of several statements
run in an explicit transaction (``Database.tx``), or, when no statement depends on another's
result, as one pipeline: one round trip and one implicit transaction (``Database.batch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from ...errors import RunlaneError
from ...faults import is_infrastructure, unavailable
from ...urls import writable_conninfo
from .direct import Direct
from .rows import Row, load_queries, utc_conninfo
from .schema import upgrade

Conn = psycopg.AsyncConnection[DictRow]
Call = tuple[str, Row]  # a statement's name in SQL and its parameters
T = TypeVar("T")
W = TypeVar("W")
R = TypeVar("R")

SQL = load_queries()
DIRECT = Direct(SQL)  # every named statement goes this way (see ``direct``)
_ATTEMPTS = 5  # a transaction aborted by a deadlock (or a racing insert) is retried whole
_CHECKOUT_TIMEOUT = 10.0
_PURGE_TIMEOUT = 5.0


class Contended(Exception):
    """Another transaction wrote the same row between our check and our write: retry whole."""


class Database:
    """A connection pool opened by the first ``open`` and closed by the matching last ``close``."""

    def __init__(self, url: str, min_size: int, max_size: int) -> None:
        self.url = url
        self.conninfo = writable_conninfo(url)  # a bad URL fails here, not at the first open
        self.min_size = min_size
        self.max_size = max_size
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._opens = 0
        self._open_lock = asyncio.Lock()

    async def open(self) -> None:
        """Migrate (once per database, under an advisory lock) and open the pool; counted.

        Raises ``StoreUnavailableError`` when the server cannot be reached.
        """
        async with self._open_lock:
            if self._opens == 0:
                try:
                    await upgrade(self.conninfo)
                    self._pool = await self._new_pool()
                except Exception as exc:
                    if is_infrastructure(exc):
                        raise unavailable(exc) from exc
                    raise
            self._opens += 1

    async def close(self) -> None:
        """Close the pool once every ``open`` has been matched; extra calls do nothing."""
        async with self._open_lock:
            if self._opens == 0:
                return
            self._opens -= 1
            if self._opens == 0 and self._pool is not None:
                pool, self._pool = self._pool, None
                await pool.close()

    async def _new_pool(self) -> AsyncConnectionPool[Conn]:
        # A connection that died idle is skipped at checkout (see `run`). One that breaks
        # during a call fails that call: the pool drops it on return, and `_purge` then tests
        # the idle ones once.
        pool = AsyncConnectionPool(
            utc_conninfo(self.conninfo),
            connection_class=psycopg.AsyncConnection[DictRow],
            # The named statements are prepared by ``direct`` on their first execution (the set
            # is small and fixed, and planning the settle or claim CTEs anew cost more than
            # executing them). psycopg prepares nothing: it would DEALLOCATE ALL, theirs too,
            # after each rollback.
            kwargs={"row_factory": dict_row, "autocommit": True, "prepare_threshold": None},
            min_size=self.min_size,
            max_size=self.max_size,
            timeout=_CHECKOUT_TIMEOUT,
            name="runlane",
            open=False,
        )
        await pool.open(wait=True)
        return pool

    async def tx(self, work: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``work`` in one transaction on one pooled connection; commit unless it raises."""

        async def in_transaction(conn: Conn) -> T:
            async with conn.transaction():
                return await work(conn)

        return await self.run(in_transaction)

    async def batch(self, *calls: Call | None) -> list[list[Row]]:
        """Statements in one transaction, sent in one round trip (see ``pipeline``).

        None = skip. Each statement's rows, or []. Nothing may depend on an earlier result.
        """
        given = [call for call in calls if call is not None]
        return await self.run(lambda conn: DIRECT.pipeline(conn, given))

    async def rows(self, name: str, /, **params: Any) -> list[Row]:
        """One statement, atomic by itself: one round trip and no BEGIN/COMMIT.

        Sent on the connection's libpq handle (see ``direct``), prepared in the round trip of
        the connection's first use of it.
        """
        return await self.run(lambda conn: DIRECT.run(conn, name, params))

    async def made_rows(self, name: str, make: Callable[[Any], T], /, **params: Any) -> list[T]:
        """``rows``, each made by ``make`` from its values in the statement's column order as
        it is read (no dict a row)."""
        return await self.run(lambda conn: DIRECT.run_made(conn, name, params, make))

    async def run(self, work: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``work`` on one pooled connection in autocommit: each statement commits alone.

        For a single statement (atomic by itself), or a unit that opens its own transaction.
        A lost connection, a server going away and a deadlock or serialization failure that
        persists raise ``StoreUnavailableError``, never the driver's error.
        """
        if self._pool is None:
            raise RunlaneError("PostgresStore is not open; await store.open() first")
        attempt, stale = 1, 0
        while True:
            try:
                # getconn/putconn, not ``connection()``: its context also commits, a no-op for
                # an autocommit connection that still cost a trip through psycopg's wait loop.
                # A connection returned inside a transaction is rolled back by the pool.
                conn = await self._pool.getconn()
                try:
                    if stale <= self.max_size and _closed_while_idle(conn):
                        # Closed, it goes back to the pool, which replaces it.
                        stale += 1
                        await conn.close()
                        continue
                    return await work(conn)
                finally:
                    await self._pool.putconn(conn)
            except (
                pg_errors.DeadlockDetected,
                pg_errors.SerializationFailure,
                pg_errors.InvalidSqlStatementName,  # deallocated (see ``direct``): none ran
                Contended,
            ) as exc:
                if attempt >= _ATTEMPTS:
                    raise unavailable(exc) from exc
                attempt += 1
            except pg_errors.ReadOnlySqlTransaction as exc:
                await self._reconnect_all()
                raise unavailable(exc) from exc
            except Exception as exc:
                if not is_infrastructure(exc):
                    raise
                await self._purge()
                raise unavailable(exc) from exc

    async def _reconnect_all(self) -> None:
        """After a write met a read-only server: a primary demoted (or fenced read-only) while
        it kept our connections open. ``target_session_attrs`` is checked only when a connection
        is made, so every pooled connection is replaced (those in use when they come back), and
        the new ones reach whichever host is the primary now."""
        if self._pool is not None:
            await self._pool.drain()

    async def _purge(self) -> None:
        """After a connection failed, test the idle ones once so the next calls get live ones."""
        if self._pool is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._pool.check(), _PURGE_TIMEOUT)


def _closed_while_idle(conn: Conn) -> bool:
    """Whether the server ended this pooled connection while it sat idle.

    An idle connection has nothing to read, unless the server ended it meanwhile (a restart,
    ``pg_terminate_backend``, an idle timeout): then its goodbye, or the end of the stream, is
    waiting on the socket. Looking costs a system call, not a round trip (the pool's own
    ``check`` would cost a query, and backs off a second after each dead connection).
    """
    if conn.closed or conn.broken:
        return True
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    return bool(readable)


class GroupCommit(Generic[W, R]):
    """Writes made while one is in flight go together in the next one: group commit.

    Idle, a write goes at once, alone, in its caller's task. Writes that arrive while one is in
    flight wait for it, then go together (up to ``most`` of them) in one call of ``flush``: one
    statement and one commit for all. ``flush`` returns each write's outcome, its result or the
    exception its caller raises; when ``flush`` itself raises, every write of the call does.
    """

    def __init__(self, flush: Callable[[list[W]], Awaitable[list[R | Exception]]], most: int):
        self._flush = flush
        self._most = most
        self._busy = False
        self._waiting: list[tuple[W, asyncio.Future[R]]] = []
        self._drainer: asyncio.Task[None] | None = None  # held: the loop keeps weak references
        self._loop: asyncio.AbstractEventLoop | None = None

    def load(self) -> int:
        """How many writes are in flight or waiting: one for the call in flight, if any, and
        each waiting write (a caller that gave its write up included)."""
        return int(self._busy) + len(self._waiting)

    async def __call__(self, item: W) -> R:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a store reopened under a new event loop: start afresh
            self._loop, self._busy, self._waiting, self._drainer = loop, False, [], None
        if self._busy:
            done: asyncio.Future[R] = loop.create_future()
            self._waiting.append((item, done))
            return await done
        self._busy = True
        try:
            [outcome] = await self._flush([item])
        finally:
            self._hand_on()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _hand_on(self) -> None:
        if self._waiting:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        else:
            self._busy = False

    async def _drain(self) -> None:
        try:
            while self._waiting:
                # A caller cancelled while it waited has given its write up.
                live = [(item, done) for item, done in self._waiting if not done.done()]
                batch, self._waiting = live[: self._most], live[self._most :]
                if batch:
                    await self._deliver(batch)
        finally:
            for _, done in self._waiting:
                done.cancel()
            self._waiting, self._busy, self._drainer = [], False, None

    async def _deliver(self, batch: list[tuple[W, asyncio.Future[R]]]) -> None:
        outcomes: list[R | Exception]
        try:
            outcomes = await self._flush([item for item, _ in batch])
        except Exception as error:
            outcomes = [error] * len(batch)
        except BaseException:  # cancelled (the loop is closing): so are the writes' callers
            for _, done in batch:
                done.cancel()
            raise
        for (_, done), outcome in zip(batch, outcomes, strict=True):
            if done.done():
                continue
            if isinstance(outcome, Exception):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)


async def execute(conn: Conn, name: str, /, **params: Any) -> None:
    await DIRECT.run(conn, name, params)


async def fetch_all(conn: Conn, name: str, /, **params: Any) -> list[Row]:
    return await DIRECT.run(conn, name, params)


async def fetch_one(conn: Conn, name: str, /, **params: Any) -> Row | None:
    rows = await DIRECT.run(conn, name, params)
    return rows[0] if rows else None


async def pipeline(conn: Conn, *calls: Call | None) -> list[list[Row]]:
    """Several statements in one round trip (None = skip); each one's rows, or [].

    Outside a transaction block, one implicit transaction: PostgreSQL runs the statements of a
    pipeline up to its Sync as one, committed at the Sync and rolled back whole if a statement
    fails. Transaction-scoped advisory locks last until then, and each statement still takes
    its own snapshot, so a statement after a lock sees what the last holder wrote.
    """
    return await DIRECT.pipeline(conn, [call for call in calls if call is not None])


__all__ = [
    "SQL",
    "Call",
    "Conn",
    "Contended",
    "Database",
    "GroupCommit",
    "execute",
    "fetch_all",
    "fetch_one",
    "pipeline",
]
