"""SqliteStore: the store contract on one SQLite file, safe for several processes at once.

Each store object owns one connection and a worker thread for it
(:mod:`runlane.stores.sqlite.worker`); every store method is one synchronous function run on
that connection, by the worker or, while the worker is idle, on the caller's thread. Concurrent
calls share a transaction (group commit); each method stays all or nothing (a failing write is
rolled back alone) and is answered only once committed. Transactions begin with
``BEGIN IMMEDIATE``: the file's write lock is taken before anything is read, so admission and
claims read and write without another process slipping in between (the point-of-claim rule).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import parse_qs

from ...activity import ActivityCount
from ...attributes import AttributeValue
from ...concurrency import run_in_thread
from ...errors import RunlaneError, RunPausing
from ...faults import is_infrastructure, unavailable
from ...models import (
    Admission,
    AuditEntry,
    CancelResult,
    Claim,
    ClaimOutcome,
    EngineInfo,
    Event,
    LaneMember,
    Lease,
    QueueSettings,
    QuotaGate,
    RetryTimer,
    Run,
    RunQuery,
    RunSpec,
    RunStatus,
    Serves,
    Settlement,
    SettleResult,
    Signal,
    SingletonGate,
    Started,
    StepKind,
    StepRecord,
    StoredSchedule,
    WindowFire,
    Writes,
)
from ...sqlite_wal import use_wal
from ...step_queues import QueueRequest, QueueView
from ...urls import SQLITE_URLS
from ..migrations import pending_migrations
from . import ops, reads, retention, schedules
from . import queues as sqlite_queues
from .checkpoints import SAFETY_PAGES, WalCheckpointer
from .worker import SqliteWorker

BUSY_TIMEOUT = 30.0  # seconds a connection waits for another's write lock, by default

P = ParamSpec("P")
T = TypeVar("T")

_URL_PREFIX = "sqlite:///"


_BULK: frozenset[Callable[..., Any]] = frozenset(
    (
        reads.page_runs,
        reads.count_runs,
        reads.run_activity,
        reads.active_run_counts,
        reads.active_code_counts,
        reads.lane_runs,
        reads.lane_members,
        reads.limited_runs,
        retention.prune_runs,
        retention.prune_events,
        schedules.list_schedules,
        schedules.due_schedules,
        schedules.fire_windows,
        ops.park_full_waiters,
    )
)
"""Jobs that may read or write many rows: always run on the worker's thread, never on the
caller's, whose event loop they would hold for as long."""

_INLINE_ROWS = 16
"""A call given more rows than this to read or write (runs to start or read, steps and children
to record) runs on the worker's thread (see ``_BULK``)."""


def _few(writes: Writes) -> bool:
    """Whether a turn's writes are few enough to run on the caller's thread."""
    return len(writes.steps) + len(writes.children) <= _INLINE_ROWS


class SqliteStore:
    """A store on a SQLite file. Several store objects and processes may share the file."""

    atomic_admission = True

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        """``busy_timeout``: seconds a write waits for another connection's write lock before
        the call fails with ``StoreUnavailableError`` (a turn then gives its run back)."""
        if busy_timeout < 0:
            raise ValueError("busy_timeout must not be negative")
        self.path = os.fspath(path)
        self.busy_timeout = busy_timeout
        self._opens = 0
        self._worker: SqliteWorker | None = None
        self._checkpointer: WalCheckpointer | None = None
        self._wal = False  # whether the file is in WAL mode (not so in memory)

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        """``sqlite:///relative/file.db`` or ``sqlite:////absolute/file.db`` (as SQLAlchemy),
        optionally with ``?busy_timeout=<seconds>``."""
        path, _, query = url.partition("?")
        if not path.startswith(_URL_PREFIX) or len(path) == len(_URL_PREFIX):
            raise ValueError(f"not a sqlite url: {url!r}; use sqlite:///path/to/file.db")
        options = parse_qs(query)
        timeout = options.pop("busy_timeout", [str(BUSY_TIMEOUT)])[-1]
        if options:
            raise ValueError(f"unknown sqlite url option(s): {', '.join(sorted(options))}")
        return cls(path[len(_URL_PREFIX) :], busy_timeout=float(timeout))

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    # ---------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Connect and migrate on the first open; later opens only count (engines may share)."""
        self._opens += 1
        if self._opens > 1:
            return
        # Not concurrency.run_in_thread: a sqlite3 connection belongs to the thread that made
        # it, and one thread per store also queues this object's transactions one after another
        # (and commits them together) instead of making them wait on each other's file lock.
        checkpointer = WalCheckpointer(self._checkpoint_connect)
        self._worker = SqliteWorker(
            self._connect, name="runlane-sqlite", on_commit=checkpointer.committed
        )
        try:
            await self._worker.start()
            if self._wal:
                self._checkpointer = checkpointer
                checkpointer.start()
        except BaseException as exc:
            await self._shut_down()
            if isinstance(exc, Exception) and is_infrastructure(exc):
                raise unavailable(exc) from exc
            raise

    async def close(self) -> None:
        """Undo one open; the last one closes the connection. Extra closes do nothing."""
        if self._opens == 0:
            return
        self._opens -= 1
        if self._opens == 0:
            await self._shut_down()

    async def _shut_down(self) -> None:
        self._opens = 0
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            await run_in_thread(checkpointer.stop)
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.stop()

    def _connect(self) -> sqlite3.Connection:
        try:
            # Used by the worker thread and, when it is idle, by a caller's (never both at once).
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.OperationalError as exc:
            # sqlite3 does not say which file it could not open; the path is what to fix.
            where = os.path.abspath(self.path)
            raise sqlite3.OperationalError(f"{exc}: {where} ({SQLITE_URLS})") from exc
        try:
            self._wal = _configure(conn, self.busy_timeout)
            _transaction(conn, _migrate, conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _checkpoint_connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    # ---------------------------------------------------------------- the worker thread

    def _running(self) -> SqliteWorker:
        if self._worker is None:
            raise RunlaneError(f"{self!r} is not open; call open() first")
        return self._worker

    async def _read(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        return await self._job(False, fn not in _BULK, fn, *args, **kwargs)

    async def _write(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        return await self._job(True, fn not in _BULK, fn, *args, **kwargs)

    async def _job(
        self,
        write: bool,
        inline: bool,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(conn, *args, **kwargs)`` through the worker; ``inline``: it may run on this
        thread (few rows: see ``_BULK`` and ``_INLINE_ROWS``)."""
        return await self._call(lambda conn: fn(conn, *args, **kwargs), write=write, inline=inline)

    async def _call(
        self, job: Callable[[sqlite3.Connection], T], *, write: bool, inline: bool = True
    ) -> T:
        """Run ``job`` through the worker (``inline``: on this thread if the worker is idle);
        the file locked past the busy timeout (or an I/O error) raises
        ``StoreUnavailableError``."""
        try:
            return await self._running().run(job, write=write, inline=inline)
        except sqlite3.OperationalError as exc:
            if is_infrastructure(exc):
                raise unavailable(exc) from exc
            raise

    # ---------------------------------------------------------------- starts

    async def create_runs(
        self,
        specs: Sequence[RunSpec],
        now: datetime,
        *,
        lease: Lease | None = None,
        claims: int = 1,
    ) -> list[Started]:
        inline = len(specs) <= _INLINE_ROWS
        return await self._job(True, inline, ops.create_runs, specs, now, lease, claims)

    # ---------------------------------------------------------------- claims

    async def pending_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        return await self._read(reads.pending_run_ids, limit, namespace, serves)

    async def due_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        return await self._read(reads.due_run_ids, now, limit, namespace, serves)

    async def expired_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        return await self._read(reads.expired_run_ids, now, limit, namespace, serves)

    async def timed_out_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        return await self._read(reads.timed_out_run_ids, now, limit, namespace, serves)

    async def claim_run(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        *,
        singleton_retry: RetryTimer,
        max_recoveries: int | None = None,
        handoff: bool = False,
        dead_letters: Collection[str] = (),
        serves: Serves | None = None,
    ) -> ClaimOutcome:
        return await self._write(
            ops.claim_run,
            run_id,
            owner,
            now,
            lease_until,
            singleton_retry,
            max_recoveries,
            handoff,
            dead_letters,
            serves,
        )

    async def renew_leases(self, leases: Mapping[str, str], lease_until: datetime) -> set[str]:
        return await self._write(ops.renew_leases, dict(leases), lease_until)

    async def hand_off_due_runs(
        self,
        now: datetime,
        limit: int,
        namespace: str | None,
        hold_until: datetime,
        *,
        serves: Serves | None = None,
    ) -> list[Run]:
        return await self._write(ops.hand_off_due_runs, now, limit, namespace, hold_until, serves)

    async def park_full_waiters(self, timers: Mapping[str, RetryTimer], now: datetime) -> list[str]:
        return await self._write(ops.park_full_waiters, timers, now)

    # ---------------------------------------------------------------- remote steps (unfenced)

    async def record_step_result(
        self,
        run_id: str,
        seq: int,
        attempt: int,
        ok: bool,
        output: object,
        error: dict[str, object] | None,
        now: datetime,
        *,
        fence: int | None = None,
    ) -> str:
        return await self._write(
            ops.record_step_result, run_id, seq, attempt, ok, output, error, now, fence
        )

    async def record_heartbeat(
        self, run_id: str, seq: int, attempt: int, at: datetime, *, fence: int | None = None
    ) -> bool:
        return await self._write(ops.record_heartbeat, run_id, seq, attempt, at, fence)

    # ---------------------------------------------------------------- remote workflow turns

    async def await_decision(
        self, run_id: str, owner: str, task_id: str, deadline: datetime, now: datetime
    ) -> None:
        if await self._write(ops.await_decision, run_id, owner, task_id, deadline, now):
            raise RunPausing(run_id)

    async def claim_decision(
        self,
        run_id: str,
        task_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        *,
        serves: Serves | None = None,
    ) -> Claim | None:
        return await self._write(
            ops.claim_decision, run_id, task_id, owner, now, lease_until, serves
        )

    async def extend_decision(self, run_id: str, task_id: str, deadline: datetime) -> bool:
        return await self._write(ops.extend_decision, run_id, task_id, deadline)

    # ---------------------------------------------------------------- turn writes (fenced)

    async def checkpoint(
        self, run_id: str, owner: str, writes: Writes, now: datetime
    ) -> list[Started]:
        started, pausing = await self._job(
            True, _few(writes), ops.checkpoint, run_id, owner, writes, now
        )
        if pausing:
            raise RunPausing(run_id, started)
        return started

    async def set_attributes(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        attributes: Mapping[str, AttributeValue],
        now: datetime,
    ) -> None:
        await self._job(
            True, _few(writes), ops.set_attributes, run_id, owner, writes, attributes, now
        )

    async def suspend_run(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        wake_at: datetime | None,
        now: datetime,
        *,
        blocked: bool = False,
    ) -> bool:
        return await self._job(
            True, _few(writes), ops.suspend_run, run_id, owner, writes, wake_at, now, blocked
        )

    async def settle_run(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        settlement: Settlement,
        now: datetime,
        *,
        successor: Lease | None = None,
        queued: bool = False,
        keyed: bool = True,
    ) -> SettleResult:
        return await self._job(
            True, _few(writes), ops.settle_run, run_id, owner, writes, settlement, now, successor
        )

    # ---------------------------------------------------------------- step queues

    async def register_queues(self, settings: Sequence[QueueSettings], now: datetime) -> None:
        await self._write(sqlite_queues.register_queues, list(settings), now)

    async def admit_step(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        request: QueueRequest,
        now: datetime,
        retry: RetryTimer,
        *,
        release: Sequence[int] = (),
    ) -> Admission:
        return await self._write(
            ops.admit_step, run_id, owner, writes, request, now, retry, list(release)
        )

    async def release_steps(
        self, run_id: str, owner: str, writes: Writes, seqs: Sequence[int], now: datetime
    ) -> list[str]:
        return await self._write(ops.release_steps, run_id, owner, writes, list(seqs), now)

    # ---------------------------------------------------------------- from outside a turn

    async def pause_run(self, run_id: str, now: datetime) -> bool:
        return await self._write(ops.pause_run, run_id, now)

    async def resume_run(self, run_id: str, now: datetime) -> bool:
        return await self._write(ops.resume_run, run_id, now)

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: object,
        now: datetime,
        *,
        kind: StepKind = StepKind.SIGNAL,
    ) -> bool:
        return await self._write(ops.deliver_signal, run_id, name, payload, now, kind)

    async def cancel_run(
        self, run_id: str, now: datetime, error: dict[str, object] | None
    ) -> CancelResult:
        return await self._write(ops.cancel_run, run_id, now, error)

    async def requeue_run(
        self,
        run_id: str,
        now: datetime,
        deadline_at: datetime | None,
        *,
        quota: QuotaGate | None = None,
        singleton: SingletonGate | None = None,
    ) -> Run:
        return await self._write(ops.requeue_run, run_id, now, deadline_at, quota, singleton)

    async def publish_event(
        self, name: str, payload: object, event_id: str | None, now: datetime
    ) -> tuple[Event, bool, list[str]]:
        return await self._write(ops.publish_event, name, payload, event_id, now)

    async def events_after(self, name: str, after_seq: int, limit: int) -> list[Event]:
        return await self._read(reads.events_after, name, after_seq, limit)

    async def latest_event_seq(self) -> int:
        return await self._read(reads.latest_event_seq)

    # ---------------------------------------------------------------- reads

    async def get_run(self, run_id: str) -> Run | None:
        return await self._read(reads.get_run, run_id)

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        return await self._job(False, len(run_ids) <= _INLINE_ROWS, reads.get_runs, run_ids)

    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | None = None,
        tag: str | None = None,
        parent_id: str | None = None,
        namespace: str | None = None,
        limit: int = 100,
        offset: int = 0,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> list[Run]:
        return await self._read(
            reads.list_runs,
            workflow=workflow,
            status=status,
            tag=tag,
            parent_id=parent_id,
            namespace=namespace,
            limit=limit,
            offset=offset,
            attributes=attributes,
        )

    async def page_runs(self, query: RunQuery, limit: int) -> list[Run]:
        return await self._read(reads.page_runs, query, limit)

    async def prune_runs(self, cutoffs: Mapping[RunStatus, datetime], limit: int) -> list[str]:
        return await self._write(retention.prune_runs, dict(cutoffs), limit)

    async def prune_events(self, before: datetime, limit: int) -> int:
        return await self._write(retention.prune_events, before, limit)

    async def count_runs(self, query: RunQuery) -> dict[RunStatus, int]:
        return await self._read(reads.count_runs, query)

    async def run_activity(
        self, since: datetime, until: datetime, namespace: str | None = None
    ) -> list[ActivityCount]:
        return await self._read(reads.run_activity, since, until, namespace)

    async def active_run_counts(
        self, namespace: str | None = None
    ) -> dict[tuple[str, RunStatus], int]:
        return await self._read(reads.active_run_counts, namespace)

    async def active_code_counts(self, namespace: str | None = None) -> dict[tuple[str, str], int]:
        return await self._read(reads.active_code_counts, namespace)

    # ---------------------------------------------------------------- engines

    async def announce_engine(self, info: EngineInfo) -> None:
        await self._write(ops.announce_engine, info)

    async def beat_engine(self, engine_id: str, at: datetime) -> bool:
        return await self._write(ops.beat_engine, engine_id, at)

    async def remove_engine(self, engine_id: str) -> None:
        await self._write(ops.remove_engine, engine_id)

    async def list_engines(self) -> list[EngineInfo]:
        return await self._read(reads.list_engines)

    async def prune_engines(self, before: datetime) -> int:
        return await self._write(ops.prune_engines, before)

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        return await self._write(ops.append_audit, entry)

    async def list_audit(
        self, limit: int, *, before: int | None = None, namespace: str | None = None
    ) -> list[AuditEntry]:
        return await self._read(reads.list_audit, limit, before, namespace)

    async def lane_runs(self, lane: str | None = None) -> list[Run]:
        return await self._read(reads.lane_runs, lane)

    async def lane_members(
        self, shown: int, namespace: str | None = None, key: str | None = None
    ) -> list[LaneMember]:
        return await self._read(reads.lane_members, shown, namespace, key)

    async def limited_runs(self, now: datetime) -> list[Run]:
        return await self._read(reads.limited_runs, now)

    async def queue_views(self) -> list[QueueView]:
        return await self._read(sqlite_queues.queue_views)

    async def get_step(self, run_id: str, seq: int) -> StepRecord | None:
        return await self._read(reads.get_step, run_id, seq)

    async def list_signals(self, run_id: str) -> list[Signal]:
        return await self._read(reads.signals, run_id)

    async def get_reply(self, run_id: str, update_id: str) -> StepRecord | None:
        return await self._read(reads.get_reply, run_id, update_id)

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        return await self._read(reads.list_steps, run_id)

    # ---------------------------------------------------------------- schedules

    async def save_schedule(self, schedule: StoredSchedule) -> StoredSchedule:
        return await self._write(schedules.save_schedule, schedule)

    async def get_schedule(self, schedule_id: str) -> StoredSchedule | None:
        return await self._read(schedules.get_schedule, schedule_id)

    async def list_schedules(self) -> list[StoredSchedule]:
        return await self._read(schedules.list_schedules)

    async def delete_schedule(self, schedule_id: str) -> bool:
        return await self._write(schedules.delete_schedule, schedule_id)

    async def due_schedules(
        self, now: datetime, limit: int, *, workflows: Collection[str] | None = None
    ) -> list[StoredSchedule]:
        return await self._read(schedules.due_schedules, now, limit, workflows)

    async def fire_schedule(
        self,
        schedule_id: str,
        *,
        expected: datetime,
        next_window: datetime,
        next_fire: datetime,
        specs: Sequence[RunSpec],
        now: datetime,
        window: datetime | None,
    ) -> list[Started] | None:
        return await self._write(
            schedules.fire_schedule,
            schedule_id,
            expected,
            next_window,
            next_fire,
            specs,
            now,
            window,
        )

    async def fire_windows(
        self, fires: Sequence[WindowFire], now: datetime
    ) -> list[list[Started] | None]:
        return await self._write(schedules.fire_windows, fires, now)


def _configure(conn: sqlite3.Connection, busy_timeout: float) -> bool:
    """Set the store's connection up; whether the file is in WAL mode."""
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    use_wal(conn, busy_timeout)
    wal = bool(conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal")
    if wal:  # the WalCheckpointer checkpoints, not the commits (see ``checkpoints``)
        conn.execute(f"PRAGMA wal_autocheckpoint = {SAFETY_PAGES}")
    # NORMAL skips the fsync at each commit, not the write: in WAL mode a committed
    # transaction is in the OS page cache before COMMIT returns, so a crashed *process*
    # loses nothing. Only an OS crash or power cut can roll back the last commits, and even
    # then the file stays consistent (never half a transaction).
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return wal


def _transaction(
    conn: sqlite3.Connection, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """Run ``fn`` in one write transaction: committed if it returns, rolled back if it raises.

    Only the migrations at open use it; store calls go through the worker's batches.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


def _migrate(conn: sqlite3.Connection) -> None:
    """Apply the migrations this file lacks (inside the caller's write transaction)."""
    for version, sql in pending_migrations("sqlite", _schema_version(conn)):
        for statement in _statements(sql):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
            (version, datetime.now(UTC).isoformat(timespec="microseconds")),
        )


def _schema_version(conn: sqlite3.Connection) -> int:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return 0
    (version,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    return int(version)


def _statements(sql: str) -> list[str]:
    """Split a migration script into statements (``executescript`` would commit our transaction)."""
    statements: list[str] = []
    pending = ""
    for line in sql.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        statements.append(pending.strip())
    return statements


__all__ = ["SqliteStore"]
