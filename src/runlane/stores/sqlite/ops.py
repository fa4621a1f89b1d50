"""The SQLite store's units of work: each function runs inside one transaction on one connection.

They mirror :mod:`runlane.stores.memory` clause by clause (that module is the reference for the
contract in :mod:`runlane.stores.base`); the caller owns the transaction, so a raised error
rolls back everything the unit wrote.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from ... import admission, step_queues
from ...attributes import AttributeValue
from ...errors import (
    LeaseLostError,
    RunCancelling,
    RunFinishedError,
    RunNotFoundError,
    not_requeueable,
)
from ...models import (
    Admission,
    AuditEntry,
    CancelResult,
    Claim,
    ClaimOutcome,
    EngineInfo,
    Event,
    Lease,
    QuotaGate,
    RetryTimer,
    Run,
    RunSpec,
    RunStatus,
    Serves,
    Settlement,
    SettleResult,
    SingletonGate,
    Started,
    StepKind,
    StepRecord,
    StepStatus,
    Writes,
    awaiting_decision,
    buffered_name,
    cancel_result,
    cancelling_run,
    claimed_run,
    evolved,
    leaves_line,
    pausable,
    paused_run,
    requeue_spec,
    requeued_run,
    resumable,
    resumed_run,
    serves_run,
    suspended_run,
)
from ...serialization import dumps
from ...step_queues import QueueRequest
from .. import runbook
from ..base import check_lease, offered
from ..memory import report_verdict, reported_step
from ..runbook import ClaimRules
from .queues import SqliteQueues
from .reads import (
    Conn,
    due_run_ids,
    get_run,
    get_runs,
    get_step,
    list_steps,
    signals,
)
from .rows import (
    RUN_COLUMNS,
    STEP_COLUMNS,
    audit_values,
    changed_columns,
    engine_values,
    event_from_row,
    from_ts,
    placeholders,
    run_from_row,
    run_values,
    step_values,
    ts,
)
from .statements import SQL

_REQUEUEABLE = (RunStatus.FAILED, RunStatus.DEAD, RunStatus.CANCELLED)

# ---------------------------------------------------------------- rows


def _existing(conn: Conn, run_id: str) -> Run:
    run = get_run(conn, run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    return run


# A run row's writes name every column in rows.RUN_COLUMNS' order, the order rows.run_values
# gives the values in: both are spelled once there, so these statements are built from them.


_INSERT_RUN = f"INSERT INTO runs ({RUN_COLUMNS}) VALUES {placeholders(RUN_COLUMNS.split(','))}"
_SAVE_STEP = f"REPLACE INTO steps ({STEP_COLUMNS}) VALUES {placeholders(STEP_COLUMNS.split(','))}"


_INSERT_NEW_RUN = f"{_INSERT_RUN} ON CONFLICT (id) DO NOTHING"


def _insert_run(conn: Conn, run: Run, statement: str = _INSERT_RUN) -> int:
    """Insert ``run`` (and index its attributes); how many rows were written."""
    written = conn.execute(statement, run_values(run)).rowcount
    if written:
        index_attributes(conn, run.id, run.attributes)
    return written


def index_attributes(conn: Conn, run_id: str, attributes: Mapping[str, AttributeValue]) -> None:
    """Write a run's ``attributes`` into attribute_runs (the listings' index), each name
    taking its new value; nothing for none. The run's row must be written already."""
    if attributes:
        conn.execute(SQL["index_attributes"], (dumps(dict(attributes)), run_id))


_UPDATE_RUN = "UPDATE runs SET {} WHERE id = ?".format(
    ", ".join(f"{column.strip()} = ?" for column in RUN_COLUMNS.split(","))
)


def _save_run(conn: Conn, run: Run, before: Run | None = None) -> None:
    """Write ``run`` over its row (read-modify-write inside the transaction): every column, or
    given ``before`` (the row as stored) only the columns it changes. SQLite rewrites
    the entries of every index over a column an update sets, changed or not: a settlement
    written whole cost about twice what its ten columns do."""
    if before is None:
        conn.execute(_UPDATE_RUN, (*run_values(run), run.id))
        return
    names, values = changed_columns(run, before)
    if names:
        conn.execute(_update_of(names), (*values, run.id))


@functools.lru_cache(maxsize=256)
def _update_of(columns: tuple[str, ...]) -> str:
    return f"UPDATE runs SET {', '.join(f'{c} = ?' for c in columns)} WHERE id = ?"


def _save_step(conn: Conn, record: StepRecord) -> None:
    conn.execute(_SAVE_STEP, step_values(record))


# ---------------------------------------------------------------- starts


def create_runs(
    conn: Conn, specs: Sequence[RunSpec], now: datetime, lease: Lease | None = None, claims: int = 1
) -> list[Started]:
    check_lease(specs, lease, claims)
    leases = offered(specs, lease, claims)
    return [create(conn, s, now, lease=o) for s, o in zip(specs, leases, strict=True)]


def create(
    conn: Conn, spec: RunSpec, now: datetime, *, gated: bool = True, lease: Lease | None = None
) -> Started:
    return runbook.create(_Rows(conn), spec, now, gated=gated, lease=lease)


def _active_ids_of_key(conn: Conn, key: str) -> list[str]:
    rows = conn.execute(SQL["active_ids_of_key"], (key,))
    return [row["id"] for row in rows]


# ---------------------------------------------------------------- claims


def _claimable(conn: Conn, run_id: str, now: datetime, handoff: bool) -> Run | None:
    row = conn.execute(
        SQL["claimable"], (run_id, int(handoff), ts(now), ts(now), ts(now))
    ).fetchone()
    return None if row is None else run_from_row(row)


def claim_run(
    conn: Conn,
    run_id: str,
    owner: str,
    now: datetime,
    lease_until: datetime,
    singleton_retry: RetryTimer,
    max_recoveries: int | None,
    handoff: bool,
    dead_letters: Collection[str] = (),
    serves: Serves | None = None,
) -> ClaimOutcome:
    run = _claimable(conn, run_id, now, handoff)
    if run is None:
        if handoff:
            conn.execute(SQL["rearm_held"], (run_id, ts(now)))
        return ClaimOutcome()
    rules = ClaimRules(singleton_retry, max_recoveries, dead_letters, serves)
    return runbook.claim(_Rows(conn), run, Lease(owner, lease_until), now, rules)


def park_full_waiters(conn: Conn, timers: Mapping[str, RetryTimer], now: datetime) -> list[str]:
    return runbook.park_full_waiters(_Rows(conn), timers, now)


class _Rows:
    """The SQLite store's run rows, for ``runbook``'s claim and settlement."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    def get(self, run_id: str) -> Run:
        return _existing(self._conn, run_id)

    def find(self, run_id: str) -> Run | None:
        return get_run(self._conn, run_id)

    def insert(self, run: Run) -> None:
        _insert_run(self._conn, run)

    def insert_new(self, run: Run) -> bool:
        return _insert_run(self._conn, run, _INSERT_NEW_RUN) == 1

    def insert_steps(self, records: Sequence[StepRecord]) -> None:
        for record in records:
            _save_step(self._conn, record)

    def held_of(self, debounce_key: str, now: datetime) -> Run | None:
        row = self._conn.execute(SQL["held_of_key"], (debounce_key, ts(now))).fetchone()
        return None if row is None else run_from_row(row)

    def rate_last(self, rate_key: str, limit: int) -> datetime | None:
        row = self._conn.execute(SQL["rate_last"], (rate_key, limit - 1)).fetchone()
        return None if row is None else from_ts(row["rate_at"])

    def quota_count(self, key: str, statuses: Collection[RunStatus]) -> int:
        counted = sorted(statuses)
        # The counted statuses are the gate's own: an IN list as long as it is.
        (count,) = self._conn.execute(
            f"SELECT COUNT(*) FROM runs WHERE concurrency_key = ? AND status IN {placeholders(counted)}",
            (key, *counted),
        ).fetchone()
        return int(count)

    def active_ids_of_key(self, key: str) -> list[str]:
        return _active_ids_of_key(self._conn, key)

    def cancel(self, run: Run, now: datetime) -> None:
        cancel_one(self._conn, run, now, None)

    def save(self, run: Run, before: Run | None = None) -> None:
        _save_run(self._conn, run, before)

    def create(self, spec: RunSpec, now: datetime, *, gated: bool) -> Started:
        return create(self._conn, spec, now, gated=gated)

    def drop_signals(self, run_id: str) -> None:
        self._conn.execute(SQL["delete_signals"], (run_id,))

    def wake_waiters(self, key: str, limit: int, now: datetime) -> list[str]:
        return _wake_waiters(self._conn, key, limit, now)

    def wake(self, run_id: str, now: datetime) -> bool:
        return _wake(self._conn, run_id, now)

    def lease(self, run: Run, lease: Lease, now: datetime) -> Claim:
        return _lease(self._conn, run, lease.owner, lease.until, now)

    def holders(self, key: str) -> int:
        (count,) = self._conn.execute(SQL["slot_holders"], (key,)).fetchone()
        return int(count)

    def admits(self, run: Run, now: datetime) -> bool:
        return _admit(self._conn, run, now)

    def release_queue(self, run_id: str, now: datetime, *, lost_turn: bool) -> list[str]:
        return step_queues.release(_book(self._conn), run_id, None, now, lost_turn=lost_turn)


def _admit(conn: Conn, run: Run, now: datetime) -> bool:
    """Whether a free slot is this waiter's. Both counts stop early (the holders by their own
    index, the waiters ahead at the free slots): a denial costs the same however many wait.
    A run its throttle or debounce still holds is no waiter yet, and so never ahead."""
    limit, key = run.singleton_limit or 1, run.singleton_key
    holders, ahead = conn.execute(
        SQL["admission_counts"], (key, key, ts(now), ts(run.created_at), run.id, limit, key)
    ).fetchone()
    return admission.admits(limit, holders, ahead)


def _lease(conn: Conn, run: Run, owner: str, lease_until: datetime, now: datetime) -> Claim:
    leased = claimed_run(run, Lease(owner, lease_until), now)
    _save_run(conn, leased)
    return Claim(leased, list_steps(conn, run.id), signals(conn, run.id))


def renew_leases(conn: Conn, leases: dict[str, str], lease_until: datetime) -> set[str]:
    kept: set[str] = set()
    for run_id, owner in leases.items():
        cursor = conn.execute(SQL["renew_lease"], (ts(lease_until), run_id, owner))
        if cursor.rowcount == 1:
            kept.add(run_id)
    return kept


def hand_off_due_runs(
    conn: Conn,
    now: datetime,
    limit: int,
    namespace: str | None,
    hold_until: datetime,
    serves: Serves | None = None,
) -> list[Run]:
    # Inside BEGIN IMMEDIATE no other writer can take the same rows between read and write.
    ids = due_run_ids(conn, now, limit, namespace, serves)
    # An IN list as long as the batch the claim took.
    conn.execute(
        f"UPDATE runs SET wake_at = ? WHERE id IN {placeholders(ids)}", (ts(hold_until), *ids)
    )
    taken = get_runs(conn, ids)
    return [taken[run_id] for run_id in ids]


# ---------------------------------------------------------------- remote steps (unfenced)


def record_step_result(
    conn: Conn,
    run_id: str,
    seq: int,
    attempt: int,
    ok: bool,
    output: object,
    error: dict[str, object] | None,
    now: datetime,
    fence: int | None,
) -> str:
    record = get_step(conn, run_id, seq)
    verdict = report_verdict(get_run(conn, run_id), record, attempt, fence)
    if verdict == "recorded" and record is not None:
        _save_step(conn, reported_step(record, ok, output, error, now))
        if _existing(conn, run_id).queued:
            step_queues.release(_book(conn), run_id, [seq], now)
    if verdict != "dropped":
        _wake(conn, run_id, now)
    return verdict


def record_heartbeat(
    conn: Conn, run_id: str, seq: int, attempt: int, at: datetime, fence: int | None
) -> bool:
    cursor = conn.execute(
        SQL["record_heartbeat"],
        (ts(at), run_id, seq, str(StepStatus.RUNNING), attempt, fence, fence),
    )
    return cursor.rowcount == 1


# ---------------------------------------------------------------- turn writes


# ---------------------------------------------------------------- remote workflow turns


def _awaiting(run: Run, task_id: str | None = None) -> bool:
    if run.status != RunStatus.SUSPENDED or run.awaiting_decision_task_id is None:
        return False
    return task_id is None or run.awaiting_decision_task_id == task_id


def await_decision(
    conn: Conn, run_id: str, owner: str, task_id: str, deadline: datetime, now: datetime
) -> bool:
    """Park the run for its remote turn's decision; True when a pause asked during the turn
    parked it paused instead (no turn goes out)."""
    run = _fenced(conn, run_id, owner)
    _save_run(conn, awaiting_decision(run, task_id, deadline, now), run)
    return run.pause_requested_at is not None


def claim_decision(
    conn: Conn,
    run_id: str,
    task_id: str,
    owner: str,
    now: datetime,
    lease_until: datetime,
    serves: Serves | None = None,
) -> Claim | None:
    run = get_run(conn, run_id)
    if run is None or not _awaiting(run, task_id) or not serves_run(serves, run):
        return None
    requested = run.wake_requested_at
    claim = _lease(conn, replace(run, awaiting_decision_task_id=None), owner, lease_until, now)
    leased = replace(claim.run, wake_requested_at=requested)
    _save_run(conn, leased)
    return Claim(leased, claim.steps, claim.signals)


def extend_decision(conn: Conn, run_id: str, task_id: str, deadline: datetime) -> bool:
    run = get_run(conn, run_id)
    if run is None or not _awaiting(run, task_id):
        return False
    if run.wake_at is None or run.wake_at < deadline:
        _save_run(conn, replace(run, wake_at=deadline), run)
    return True


def _fenced(conn: Conn, run_id: str, owner: str, *, allow_cancelling: bool = False) -> Run:
    run = get_run(conn, run_id)
    status = run.status if run is not None and run.lease_owner == owner else None
    _check_fence(run_id, owner, status, allow_cancelling)
    assert run is not None  # or the fence raised
    return run


def _check_fence(run_id: str, owner: str, status: str | None, allow_cancelling: bool) -> None:
    """``status``: the run's when ``owner`` is its lease owner (None: it is not)."""
    if status not in (RunStatus.RUNNING, RunStatus.CANCELLING):
        raise LeaseLostError(f"lease on run {run_id!r} is no longer held by {owner}")
    if status == RunStatus.CANCELLING and not allow_cancelling:
        raise RunCancelling(f"run {run_id!r} was cancelled")


def _after_writes(conn: Conn, run: Run, writes: Writes) -> Run:
    """The fenced run as its turn's writes left it: they touch only its steps and signals,
    unless they started children (a child's gate may have cancelled it)."""
    return _existing(conn, run.id) if writes.children else run


def _apply(conn: Conn, run_id: str, writes: Writes, now: datetime) -> list[Started]:
    for record in writes.steps:
        _save_step(conn, record)
    consumed = list(writes.consumed_signals)
    if consumed:  # an IN list as long as the signals the turn consumed
        conn.execute(
            f"DELETE FROM signals WHERE run_id = ? AND id IN {placeholders(consumed)}",
            (run_id, *consumed),
        )
    return [create(conn, spec, now) for spec in writes.children]


def checkpoint(
    conn: Conn, run_id: str, owner: str, writes: Writes, now: datetime
) -> tuple[list[Started], bool]:
    """The runs the writes started, and whether a pause was asked of the run (the store says
    so once the writes committed: see ``Store.checkpoint``)."""
    row = conn.execute(SQL["fence_and_touch"], (ts(now), run_id, owner)).fetchone()
    _check_fence(run_id, owner, None if row is None else row["status"], allow_cancelling=False)
    assert row is not None  # or the fence raised
    return _apply(conn, run_id, writes, now), row["pause_requested_at"] is not None


def pause_run(conn: Conn, run_id: str, now: datetime) -> bool:
    run = _existing(conn, run_id)
    if not pausable(run):
        return False
    paused = paused_run(run, now)
    _save_run(conn, paused, run)
    if leaves_line(run) and paused.status == RunStatus.PAUSED:
        assert run.singleton_key is not None
        _wake_waiters(conn, run.singleton_key, run.singleton_limit or 1, now)
    return True


def resume_run(conn: Conn, run_id: str, now: datetime) -> bool:
    run = _existing(conn, run_id)
    if not resumable(run):
        return False
    _save_run(conn, resumed_run(run, now), run)
    return True


def set_attributes(
    conn: Conn,
    run_id: str,
    owner: str,
    writes: Writes,
    attributes: Mapping[str, AttributeValue],
    now: datetime,
) -> None:
    run = _fenced(conn, run_id, owner)
    _apply(conn, run_id, writes, now)
    merged = evolved(run, attributes={**run.attributes, **attributes}, updated_at=now)
    _save_run(conn, merged, run)
    index_attributes(conn, run_id, attributes)


def suspend_run(
    conn: Conn,
    run_id: str,
    owner: str,
    writes: Writes,
    wake_at: datetime | None,
    now: datetime,
    blocked: bool = False,
) -> bool:
    run = _fenced(conn, run_id, owner)
    _apply(conn, run_id, writes, now)
    run = _after_writes(conn, run, writes)
    # Woken during the turn, or an event a wait has not read was published meanwhile: due.
    due = run.wake_requested_at is not None or any(
        conn.execute(SQL["event_since"], wait).fetchone() for wait in writes.events
    )
    _save_run(conn, suspended_run(run, wake_at, now, blocked, due=due), run)
    return due


def settle_run(
    conn: Conn,
    run_id: str,
    owner: str,
    writes: Writes,
    settlement: Settlement,
    now: datetime,
    successor: Lease | None = None,
) -> SettleResult:
    run = _fenced(conn, run_id, owner, allow_cancelling=settlement.status == RunStatus.CANCELLED)
    _apply(conn, run_id, writes, now)
    return runbook.settle(_Rows(conn), _after_writes(conn, run, writes), settlement, now, successor)


def finish(
    conn: Conn, run: Run, settlement: Settlement, now: datetime, woken: list[str] | None = None
) -> Run:
    """Settle ``run`` terminal (``runbook.finish``)."""
    return runbook.finish(_Rows(conn), run, settlement, now, [] if woken is None else woken)


def _wake_waiters(conn: Conn, key: str, limit: int, now: datetime) -> list[str]:
    rows = conn.execute(SQL["next_waiters"], (key, ts(now), limit, key))
    chosen = [row["id"] for row in rows]
    for waiter_id in chosen:
        _wake(conn, waiter_id, now)
    if chosen:
        conn.execute(SQL["stamp_handoff"], (ts(now), dumps(chosen)))
    return chosen


def _wake(conn: Conn, run_id: str, now: datetime) -> bool:
    run = get_run(conn, run_id)
    if run is None or run.is_terminal:
        return False
    stamp = ts(now)
    if _awaiting(run):
        conn.execute(SQL["request_wake"], (stamp, run_id))
        return False
    conn.execute(SQL["wake_waiting"], (stamp, stamp, run_id))
    conn.execute(SQL["request_wake_of_leased"], (stamp, run_id))
    return True


# ---------------------------------------------------------------- step queues


def _book(conn: Conn) -> SqliteQueues:
    return SqliteQueues(conn, _wake)


def admit_step(
    conn: Conn,
    run_id: str,
    owner: str,
    writes: Writes,
    request: QueueRequest,
    now: datetime,
    retry: RetryTimer,
    release: Sequence[int],
) -> Admission:
    _fenced(conn, run_id, owner)
    _apply(conn, run_id, writes, now)
    book = _book(conn)
    woken = step_queues.release(book, run_id, release, now) if release else []
    return step_queues.admitted(step_queues.admit(book, run_id, request, now, retry), woken)


def release_steps(
    conn: Conn, run_id: str, owner: str, writes: Writes, seqs: Sequence[int], now: datetime
) -> list[str]:
    _fenced(conn, run_id, owner)
    _apply(conn, run_id, writes, now)
    return step_queues.release(_book(conn), run_id, seqs, now)


# ---------------------------------------------------------------- from outside a turn


def deliver_signal(
    conn: Conn, run_id: str, name: str, payload: object, now: datetime, kind: StepKind
) -> bool:
    run = _existing(conn, run_id)
    if run.is_terminal:
        raise RunFinishedError(run_id, run.status)
    buffered = buffered_name(kind, name)
    conn.execute(SQL["insert_signal"], (run_id, buffered, dumps(payload), ts(now)))
    if _waits_for(conn, run_id, kind, name):
        return _wake(conn, run_id, now)
    if run.status in (RunStatus.RUNNING, RunStatus.CANCELLING) or _awaiting(run):
        _wake(conn, run_id, now)  # the turn in flight (here or on a worker) may have missed it
    return False


def _waits_for(conn: Conn, run_id: str, kind: StepKind, name: str) -> bool:
    row = conn.execute(
        SQL["waits_for"], (run_id, str(kind), name, str(StepStatus.PENDING))
    ).fetchone()
    return row is not None


def cancel_run(
    conn: Conn, run_id: str, now: datetime, error: dict[str, object] | None
) -> CancelResult:
    _existing(conn, run_id)
    result = CancelResult()
    for target_id in [run_id, *_descendant_ids(conn, run_id)]:
        if cancel_one(conn, _existing(conn, target_id), now, error, result.woken):
            result.changed.append(target_id)
    return cancel_result(result)


def _descendant_ids(conn: Conn, run_id: str) -> list[str]:
    rows = conn.execute(SQL["descendant_ids"], (run_id,))
    return [row["id"] for row in rows]


def cancel_one(
    conn: Conn,
    run: Run,
    now: datetime,
    error: dict[str, object] | None,
    woken: list[str] | None = None,
) -> bool:
    if run.is_terminal or run.status == RunStatus.CANCELLING:
        return False
    if run.status == RunStatus.RUNNING:
        _save_run(conn, cancelling_run(run, error, now), run)
    else:
        finish(conn, run, Settlement(RunStatus.CANCELLED, None, error), now, woken)
    return True


def requeue_run(
    conn: Conn,
    run_id: str,
    now: datetime,
    deadline_at: datetime | None,
    quota: QuotaGate | None = None,
    singleton: SingletonGate | None = None,
) -> Run:
    run = _existing(conn, run_id)
    if run.status not in _REQUEUEABLE:
        raise not_requeueable(run_id, run.status)
    refusal = runbook.refusal(_Rows(conn), requeue_spec(run, quota, singleton), now)
    if refusal is not None:
        raise refusal
    conn.execute(SQL["delete_unfinished_steps"], (run_id, str(StepStatus.COMPLETED)))
    requeued = requeued_run(run, now, deadline_at)
    _save_run(conn, requeued)
    return requeued


def publish_event(
    conn: Conn, name: str, payload: object, event_id: str | None, now: datetime
) -> tuple[Event, bool, list[str]]:
    if event_id is not None:
        row = conn.execute(SQL["get_event"], (event_id,)).fetchone()
        if row is not None:
            return event_from_row(row), False, []
    cursor = conn.execute(SQL["insert_event"], (event_id, name, dumps(payload), ts(now)))
    assert cursor.lastrowid is not None
    event = Event(cursor.lastrowid, name, payload, now, event_id)
    waiting = _ids_waiting_for(conn, StepKind.EVENT, name)
    return event, True, [run_id for run_id in waiting if _wake(conn, run_id, now)]


def _ids_waiting_for(conn: Conn, kind: StepKind, name: str) -> list[str]:
    rows = conn.execute(SQL["ids_waiting_for"], (str(kind), name, str(StepStatus.PENDING)))
    return [row["id"] for row in rows]


# ---------------------------------------------------------------- engines


def announce_engine(conn: Conn, info: EngineInfo) -> None:
    conn.execute(SQL["announce_engine"], engine_values(info))


def beat_engine(conn: Conn, engine_id: str, at: datetime) -> bool:
    return conn.execute(SQL["beat_engine"], (ts(at), engine_id)).rowcount > 0


def remove_engine(conn: Conn, engine_id: str) -> None:
    conn.execute(SQL["remove_engine"], (engine_id,))


def prune_engines(conn: Conn, before: datetime) -> int:
    return int(conn.execute(SQL["prune_engines"], (ts(before),)).rowcount)


def append_audit(conn: Conn, entry: AuditEntry) -> AuditEntry:
    cursor = conn.execute(SQL["append_audit"], audit_values(entry))
    return replace(entry, id=int(cursor.lastrowid or 0))


__all__ = [
    "announce_engine",
    "append_audit",
    "beat_engine",
    "cancel_run",
    "checkpoint",
    "claim_run",
    "create_runs",
    "deliver_signal",
    "hand_off_due_runs",
    "index_attributes",
    "pause_run",
    "prune_engines",
    "publish_event",
    "record_heartbeat",
    "record_step_result",
    "remove_engine",
    "renew_leases",
    "requeue_run",
    "resume_run",
    "set_attributes",
    "settle_run",
    "suspend_run",
]
