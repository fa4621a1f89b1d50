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
from typing import Any

import psycopg
from psycopg import abc
from psycopg import errors as pg_errors
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ExecStatus
from psycopg.pq.abc import PGconn, PGresult
from psycopg.rows import DictRow

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


class Direct:
    """Runs named statements on pooled connections' libpq handles (see the module)."""

    def __init__(self, statements: Mapping[str, str]) -> None:
        self._statements = statements
        self._numbered: dict[str, Numbered] = {}
        self._sessions: weakref.WeakKeyDictionary[Conn, _Session] = weakref.WeakKeyDictionary()

    async def run(self, conn: Conn, name: str, params: Mapping[str, Any]) -> list[Row]:
        """The statement's rows, or [] for one that returns none.

        Raises psycopg's error for a statement the server refused (the connection stays
        usable), and psycopg's ``OperationalError`` for a lost connection. Interrupted in
        flight (cancelled, or the connection failed), the connection is closed: the pool
        replaces it, and the statement's outcome is unknown, as it is for a cursor's.
        """
        session = self._sessions.get(conn)
        if session is None:
            session = self._sessions[conn] = _Session(Transformer(conn))
        statement = self._numbered.get(name)
        if statement is None:
            statement = self._numbered[name] = numbered(name, self._statements[name])
        tx = session.transformer
        dumped = tx.dump_sequence([params[p] for p in statement.order], statement.formats)
        types = tx.types or ()
        key = (name, types)
        pgname = session.prepared.get(key)
        if pgname is None:
            # Prepared with the types psycopg would send, in the round trip (and the implicit
            # transaction) of its first execution.
            pgname = session.next_name()
            result = await _first_execution(conn, pgname, statement.sql, types, dumped)
            session.prepared[key] = pgname
        else:
            known = pgname
            try:
                [result] = await _exchange(conn, lambda pg: pg.send_query_prepared(known, dumped))
            except pg_errors.InvalidSqlStatementName:
                # psycopg sends DEALLOCATE ALL after a rollback on this connection: every
                # statement is gone. Refused before it ran, this one is prepared again.
                session.prepared.clear()
                pgname = session.next_name()
                result = await _first_execution(conn, pgname, statement.sql, types, dumped)
                session.prepared[key] = pgname
        if result.status != ExecStatus.TUPLES_OK:
            return []
        names = session.columns.get(name)
        if names is None:
            names = session.columns[name] = [
                (result.fname(i) or b"").decode() for i in range(result.nfields)
            ]
        tx.set_pgresult(result)
        rows: list[Row] = tx.load_rows(
            0, result.ntuples, lambda record: dict(zip(names, record, strict=True))
        )
        return rows


async def _first_execution(
    conn: Conn, pgname: bytes, sql: bytes, types: Sequence[int], dumped: Sequence[Buffer | None]
) -> PGresult:
    """Prepare and execute in one pipeline: one round trip."""

    def send(pg: PGconn) -> None:
        pg.enter_pipeline_mode()
        pg.send_prepare(pgname, sql, param_types=types)
        pg.send_query_prepared(pgname, dumped)
        pg.pipeline_sync()

    results = await _exchange(conn, send, pipeline=True)
    return results[-1]


async def _exchange(
    conn: Conn, send: Callable[[PGconn], None], *, pipeline: bool = False
) -> list[PGresult]:
    """Send one command (or one pipeline) and read its results; raise the first error."""
    pg = conn.pgconn
    try:
        send(pg)
        results = await _results(pg, pipeline)
        if pipeline:
            pg.exit_pipeline_mode()
    except BaseException:
        await conn.close()
        raise
    for result in results:
        if result.status in _FATAL:
            raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
    return results


async def _results(pg: PGconn, pipeline: bool) -> list[PGresult]:
    """A command's results, up to its end; a pipeline's, up to its sync."""
    loop = asyncio.get_running_loop()
    fd = pg.socket
    while pg.flush():
        await _ready(loop, fd, write=True)
    results: list[PGresult] = []
    while True:
        if pg.is_busy():
            await _ready(loop, fd, write=False)
            pg.consume_input()
            continue
        result = pg.get_result()
        if result is None:
            if pipeline:
                continue  # the end of one statement's results
            return results
        if result.status == ExecStatus.PIPELINE_SYNC:
            return results
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
