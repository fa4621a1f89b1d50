"""The SQLite store's worker thread: one connection, and group commit of concurrent store calls.

Store calls queue jobs; the thread takes every job queued at that moment (at most ``BATCH``,
never waiting for more, so a lone call runs at once) and runs them in queue order. A batch with
a write runs in one ``BEGIN IMMEDIATE ... COMMIT``, and every job of the batch is answered only
after the ``COMMIT`` (if the commit fails, every job gets that error). A write job that raises
affects nothing else: the batch is rolled back and runs again with each write job in its own
``SAVEPOINT``, the failing one rolled back to it (a job is a function of the connection, so
running it again does the same); when it is the batch's only write and runs last, the rollback
alone suffices. Savepoints cost two statements per write job, which the common batch, where
nothing raises, no longer pays. A batch of reads takes no write lock. The answers go back with
one ``call_soon_threadsafe`` per batch: one thread hop each way for the whole batch instead of
one per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ...errors import RunlaneError

T = TypeVar("T")

BATCH = 256

Job = Callable[[sqlite3.Connection], Any]


class _Call:
    """One queued store call: its job, whether it writes, and where its answer goes."""

    __slots__ = ("cancelled", "error", "fn", "future", "loop", "result", "write")

    def __init__(self, fn: Job | None, write: bool, loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn  # None: the stop sentinel
        self.write = write
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.cancelled = False
        self.result: Any = None
        self.error: BaseException | None = None


class SqliteWorker:
    """A thread that owns one connection and runs the queued calls in group-committed batches."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        name: str,
        on_commit: Callable[[], None] | None = None,
    ) -> None:
        """``on_commit`` is called on the thread after each batch that committed a write."""
        self._connect = connect
        self._on_commit = on_commit
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._name = name

    async def start(self) -> None:
        """Start the thread; returns once it has connected (raises what connecting raised)."""
        # A daemon, unlike ThreadPoolExecutor's: an engine that never closes its store must not
        # hang interpreter exit. A batch cut off there is rolled back whole by SQLite.
        # The first call is queued before the thread starts: if connecting fails, the thread
        # answers it with that error rather than closing the queue before it arrives.
        call = self._enqueue(_nothing, write=False)
        threading.Thread(target=self._main, name=self._name, daemon=True).start()
        await self._answer_of(call)

    async def stop(self) -> None:
        """Run everything queued so far, then close the connection and end the thread."""
        with contextlib.suppress(RunlaneError):  # already stopped (connecting failed)
            await self._put(None, write=False)

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """Run ``fn(conn)`` on the thread; a write runs inside a transaction, in a savepoint."""
        return cast(T, await self._put(fn, write))

    async def _put(self, fn: Job | None, write: bool) -> Any:
        return await self._answer_of(self._enqueue(fn, write))

    def _enqueue(self, fn: Job | None, write: bool) -> _Call:
        call = _Call(fn, write, asyncio.get_running_loop())
        with self._lock:
            if self._closed:
                raise _not_open()
            self._queue.put(call)
        return call

    async def _answer_of(self, call: _Call) -> Any:
        try:
            return await call.future
        except asyncio.CancelledError:
            # Not taken yet: it will be skipped. Already taken: it runs to completion, since a
            # batch commits or rolls back as a whole, never halfway.
            call.cancelled = True
            raise

    # ---------------------------------------------------------------- on the thread

    def _main(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._close_queue(exc)
            return
        while True:
            calls = self._take()
            if not calls:
                continue
            stopping = calls[-1].fn is None
            if (
                _run_batch(conn, [call for call in calls if call.fn is not None])
                and self._on_commit
            ):
                self._on_commit()
            if stopping:
                conn.close()
                self._close_queue(None, calls)
                return
            _answer(calls)

    def _take(self) -> list[_Call]:
        """Every call queued now (up to ``BATCH``) that is still awaited, up to a stop."""
        calls = [self._queue.get()]
        while len(calls) < BATCH and calls[-1].fn is not None:
            try:
                calls.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return [call for call in calls if not call.cancelled or call.fn is None]

    def _close_queue(
        self, error: BaseException | None, answered: list[_Call] | None = None
    ) -> None:
        """Refuse new calls; answer ``answered`` and fail whatever is still queued."""
        with self._lock:
            self._closed = True
        left = list(answered or [])
        while True:
            try:
                call = self._queue.get_nowait()
            except queue.Empty:
                break
            call.error = error or _not_open()
            left.append(call)
        _answer(left)


def _not_open() -> RunlaneError:
    return RunlaneError("the SQLite store is not open; call open() first")


def _nothing(conn: sqlite3.Connection) -> None:
    return None


def _run_batch(conn: sqlite3.Connection, calls: list[_Call]) -> bool:
    """Run a batch; whether it committed a write."""
    if not any(call.write for call in calls):
        for call in calls:
            _run(conn, call)
        return False
    # First without savepoints. A write job that raises ends that try (rolled back): the batch
    # runs again with a savepoint per write job (a job is a function of the connection, so it
    # does the same again), unless the failed job was the batch's only write and ran last.
    committed = _transaction(conn, calls, savepoints=False)
    if committed is not None:
        return committed
    writes = [call for call in calls if call.write]
    if len(writes) == 1 and calls[-1] is writes[0]:
        return False
    for call in calls:
        call.result, call.error = None, None
    return bool(_transaction(conn, calls, savepoints=True))


def _transaction(conn: sqlite3.Connection, calls: list[_Call], *, savepoints: bool) -> bool | None:
    """One try at a batch with a write: True if it committed, False if it failed as a whole
    (its writes answered with the error); None if, without savepoints, a write job raised and
    the transaction was rolled back there (the jobs after it did not run)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        # The file is write-locked past the busy timeout (or failing): the batch's reads need
        # no write lock (a WAL reader never waits for a writer), so only its writes fail.
        for call in calls:
            if call.write:
                call.error = exc
            else:
                _run(conn, call)
        return False
    try:
        for call in calls:
            if call.write and savepoints:
                _run_in_savepoint(conn, call)
            else:
                _run(conn, call)
            if not conn.in_transaction:
                # SQLite rolls back the whole transaction on some errors (full disk, I/O):
                # the jobs before this one are lost, and later ones must not autocommit.
                raise sqlite3.OperationalError("the batch's transaction was rolled back")
            if call.write and call.error is not None and not savepoints:
                conn.execute("ROLLBACK")
                return None
        conn.execute("COMMIT")
        return True
    except BaseException as exc:
        # A failed ROLLBACK must not kill the thread: its callers would wait forever. The next
        # BEGIN then fails too, and its callers get that error.
        with contextlib.suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        for call in calls:
            call.error = exc
        return False


def _run(conn: sqlite3.Connection, call: _Call) -> None:
    assert call.fn is not None
    try:
        call.result = call.fn(conn)
    except BaseException as exc:
        call.error = exc


def _run_in_savepoint(conn: sqlite3.Connection, call: _Call) -> None:
    conn.execute("SAVEPOINT job")
    _run(conn, call)
    if call.error is not None:
        conn.execute("ROLLBACK TO job")
    conn.execute("RELEASE job")


def _answer(calls: list[_Call]) -> None:
    """Hand the answers back: one hop per event loop (there is almost always one)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
    for call in calls:
        by_loop.setdefault(call.loop, []).append(call)
    for loop, answered in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits these
            loop.call_soon_threadsafe(_settle, answered)


def _settle(calls: list[_Call]) -> None:
    for call in calls:
        if call.future.done():  # cancelled while its job ran
            continue
        if call.error is not None:
            call.future.set_exception(call.error)
        else:
            call.future.set_result(call.result)


__all__ = ["BATCH", "SqliteWorker"]
