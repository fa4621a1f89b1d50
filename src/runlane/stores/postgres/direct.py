"""Single statements sent on a pooled connection's libpq handle, past psycopg's cursor.

A store call that is one statement (``Database.rows``: every start, checkpoint and settlement)
spent about 160 us of client CPU per execution in psycopg's cursor: the query conversion, the
cursor object, its prepared-statement bookkeeping and the generator-driven waits. The same
execution on the connection's libpq handle costs about 70 us. psycopg's own (C) transformer
still dumps the parameters, with the types it gives them through a cursor, and loads the rows,
so every value is sent and read back exactly as through a cursor.

Each statement is prepared per connection and per parameter types (as psycopg's prepared
statements are), in the same pipeline as its first execution: no round trip or transaction of
its own.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg import abc, pq
from psycopg import errors as pg_errors
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ExecStatus
from psycopg.pq.abc import PGconn, PGresult
from psycopg.rows import DictRow

T = TypeVar("T")

Conn = psycopg.AsyncConnection[DictRow]
Row = dict[str, Any]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_FATAL = (ExecStatus.FATAL_ERROR, ExecStatus.BAD_RESPONSE, ExecStatus.NONFATAL_ERROR)


@dataclass(frozen=True, slots=True)
class Numbered:
    """A named statement with its ``%(name)s`` placeholders numbered for the protocol."""

    sql: bytes
    order: tuple[str, ...]  # the parameter behind each number, $1 first
    formats: tuple[PyFormat, ...]  # text, for each


def numbered(name: str, sql: str) -> Numbered:
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        param = match.group(1)
        if param not in order:
            order.append(param)
        return f"${order.index(param) + 1}"

    text = _PLACEHOLDER.sub(number, sql)
    if "%" in text.replace("%%", ""):
        raise ValueError(f"statement {name!r} has a placeholder other than %(name)s")
    return Numbered(text.replace("%%", "%").encode(), tuple(order), (PyFormat.TEXT,) * len(order))


@dataclass(slots=True)
class _Session:
    """The statements one connection has prepared, by name and parameter types."""

    transformer: abc.Transformer
    prepared: dict[tuple[str, tuple[int, ...]], bytes] = field(default_factory=dict)
    columns: dict[str, list[str]] = field(default_factory=dict)  # each statement's result's
    made: int = 0

    def next_name(self) -> bytes:
        # Never reused: a statement prepared in a pipeline that then failed may live on.
        self.made += 1
        return b"runlane_%d" % self.made


@dataclass(slots=True)
class _Call:
    """One statement of a pipeline, its parameters dumped; ``fresh`` when it is prepared in it."""

    name: str
    sql: bytes
    types: tuple[int, ...]
    dumped: Sequence[Buffer | None]
    pgname: bytes = b""
    fresh: bool = False

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        """What a connection's prepared statement is known by."""
        return (self.name, self.types)


class Direct:
    """Runs named statements on pooled connections' libpq handles (see the module).

    A call raises psycopg's error for a statement the server refused (the connection stays
    usable), and psycopg's ``OperationalError`` for a lost connection. Interrupted in flight
    (cancelled, or the connection failed), the connection is closed: the pool replaces it, and
    the outcome is unknown, as it is for a cursor's.
    """

    def __init__(self, statements: Mapping[str, str]) -> None:
        self._statements = statements
        self._numbered: dict[str, Numbered] = {}
        self._sessions: weakref.WeakKeyDictionary[Conn, _Session] = weakref.WeakKeyDictionary()

    async def run(self, conn: Conn, name: str, params: Mapping[str, Any]) -> list[Row]:
        """One statement (atomic by itself in autocommit): its rows, or [] for none."""
        session, result, call = await self._prepared(conn, name, params)
        if result is not None:
            return self._rows(session, name, result)
        [rows] = await self._pipeline(conn, session, [call])
        return rows

    async def run_made(
        self, conn: Conn, name: str, params: Mapping[str, Any], make: Callable[[Any], T]
    ) -> list[T]:
        """``run``, each row made by ``make`` from its values in column order, as it is read:
        for the reads of thousands of rows (the lanes overview), where a dict or even a tuple
        a row that lives until the last is read is that many more objects for the garbage
        collector to walk."""
        session, result, call = await self._prepared(conn, name, params)
        if result is None:  # the connection's first use of it: prepared in a pipeline
            [rows] = await self._pipeline(conn, session, [call])
            return [make(tuple(row.values())) for row in rows]
        return _load(session, result, make)

    async def _prepared(
        self, conn: Conn, name: str, params: Mapping[str, Any]
    ) -> tuple[_Session, PGresult | None, _Call]:
        """The statement's result when this connection has it prepared (None when not yet: the
        call to send in a pipeline, which prepares it)."""
        session = self._session(conn)
        call = self._call(session, name, params)
        if call.pgname:
            try:
                pgname, dumped = call.pgname, call.dumped
                [[result]] = await _exchange(
                    conn, lambda pg: pg.send_query_prepared(pgname, dumped)
                )
                return session, result, call
            except pg_errors.InvalidSqlStatementName:
                if not _deallocated(conn, session):
                    raise
                call = self._call(session, name, params)
        return session, None, call

    async def pipeline(
        self, conn: Conn, calls: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> list[list[Row]]:
        """Statements in one round trip; each one's rows, or [].

        Outside a transaction block they are one implicit transaction, committed at the
        pipeline's end and rolled back whole if one fails (PostgreSQL's rule for the statements
        up to a Sync); inside one, they are part of it.
        """
        session = self._session(conn)
        batch = [self._call(session, name, params) for name, params in calls]
        try:
            return await self._pipeline(conn, session, batch)
        except pg_errors.InvalidSqlStatementName:
            if not _deallocated(conn, session):
                raise
            batch = [self._call(session, name, params) for name, params in calls]
            return await self._pipeline(conn, session, batch)

    def _session(self, conn: Conn) -> _Session:
        session = self._sessions.get(conn)
        if session is None:
            session = self._sessions[conn] = _Session(Transformer(conn))
        return session

    def _call(self, session: _Session, name: str, params: Mapping[str, Any]) -> _Call:
        statement = self._numbered.get(name)
        if statement is None:
            statement = self._numbered[name] = numbered(name, self._statements[name])
        tx = session.transformer
        dumped = tx.dump_sequence([params[p] for p in statement.order], statement.formats)
        types = tx.types or ()
        return _Call(name, statement.sql, types, dumped, session.prepared.get((name, types), b""))

    async def _pipeline(self, conn: Conn, session: _Session, batch: list[_Call]) -> list[list[Row]]:
        # A statement not yet prepared on this connection is prepared in the pipeline, with the
        # types psycopg would send (once, however often the pipeline holds it).
        fresh: dict[tuple[str, tuple[int, ...]], bytes] = {}
        for call in batch:
            if not call.pgname:
                known = fresh.get(call.key)
                call.fresh = known is None
                call.pgname = known or session.next_name()
                fresh[call.key] = call.pgname

        def send(pg: PGconn) -> None:
            pg.enter_pipeline_mode()
            for call in batch:
                if call.fresh:
                    pg.send_prepare(call.pgname, call.sql, param_types=call.types)
                pg.send_query_prepared(call.pgname, call.dumped)
            pg.pipeline_sync()

        groups = iter(await _exchange(conn, send, pipeline=True))
        session.prepared.update(fresh)
        rows = []
        for call in batch:
            if call.fresh:
                next(groups)  # the prepare's
            [result] = next(groups)
            rows.append(self._rows(session, call.name, result))
        return rows

    def _rows(self, session: _Session, name: str, result: PGresult) -> list[Row]:
        if result.status != ExecStatus.TUPLES_OK:
            return []
        names = session.columns.get(name)
        if names is None:
            names = session.columns[name] = [
                (result.fname(i) or b"").decode() for i in range(result.nfields)
            ]
        return _load(session, result, lambda record: dict(zip(names, record, strict=True)))


def _load(session: _Session, result: PGresult, make: Callable[[Any], T]) -> list[T]:
    """``result``'s rows, each made by ``make`` from its values in column order ([] when the
    statement returns no rows)."""
    if result.status != ExecStatus.TUPLES_OK:
        return []
    session.transformer.set_pgresult(result)
    rows: list[T] = session.transformer.load_rows(0, result.ntuples, make)
    return rows


def _deallocated(conn: Conn, session: _Session) -> bool:
    """A statement this connection had prepared is gone (a ``DEALLOCATE ALL`` or ``DISCARD
    ALL`` on it): every one is forgotten, to be prepared again. Whether the refused call may go
    again at once: outside a transaction block (nothing ran); inside one the error stands, and
    the caller retries its transaction whole (``Database.run`` does)."""
    session.prepared.clear()
    return conn.pgconn.transaction_status == pq.TransactionStatus.IDLE


async def _exchange(
    conn: Conn, send: Callable[[PGconn], None], *, pipeline: bool = False
) -> list[list[PGresult]]:
    """Send one statement (or a pipeline) and read its results, each statement's apart; raise
    the first error among them."""
    pg = conn.pgconn
    try:
        send(pg)
        groups = await _results(pg, pipeline)
        if pipeline:
            pg.exit_pipeline_mode()
    except BaseException:
        await conn.close()
        raise
    for group in groups:
        for result in group:
            if result.status in _FATAL:
                raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
    return groups


async def _results(pg: PGconn, pipeline: bool) -> list[list[PGresult]]:
    """Each statement's results, up to the end of one statement, or of a pipeline's sync."""
    loop = asyncio.get_running_loop()
    fd = pg.socket
    while pg.flush():
        await _ready(loop, fd, write=True)
    groups: list[list[PGresult]] = []
    results: list[PGresult] = []
    while True:
        if pg.is_busy():
            await _ready(loop, fd, write=False)
            pg.consume_input()
            continue
        result = pg.get_result()
        if result is None:  # the end of one statement's results
            groups.append(results)
            if not pipeline:
                return groups
            results = []
        elif result.status == ExecStatus.PIPELINE_SYNC:
            return groups
        else:
            results.append(result)


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> None:
    waiter: asyncio.Future[None] = loop.create_future()
    if write:
        loop.add_writer(fd, _wake, waiter)
    else:
        loop.add_reader(fd, _wake, waiter)
    try:
        await waiter
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


__all__ = ["Direct", "Numbered", "numbered"]
