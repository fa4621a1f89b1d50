"""The SQLite store's units of work: each function runs inside one transaction on one connection.

They mirror :mod:`runlane.stores.memory` clause by clause (that module is the reference for the
contract in :mod:`runlane.stores.base`); the caller owns the transaction, so a raised error
rolls back everything the unit wrote.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime

from .. import admission, queues
from ..errors import (
    LeaseLostError,
    RunCancelling,
    RunFinishedError,
    RunNotFoundError,
    not_requeueable,
)
from ..models import (
    Admission,
    Claim,
    ClaimOutcome,
    Event,
    Lease,
    QuotaGate,
    RetryTimer,
    Run,
    RunSpec,
    RunStatus,
    Settlement,
    SettleResult,
    SingletonGate,
    Started,
    StepKind,
    StepRecord,
    StepStatus,
    Writes,
    blocked_run,
    dead_settlement,
    debounced_run,
    held_run,
    leased_run,
    ready_ids,
    refused_handler,
    requeue_spec,
    requeued_run,
    run_from_spec,
    settled_run,
)
from ..queues import QueueRequest
from ..serialization import dumps
from .base import check_lease
from .memory import report_verdict, reported_step
from .sqlite_queues import SqliteQueues
from .sqlite_reads import (
    ACTIVE,
    LEASED,
    WAITERS,
    WAITING,
    Conn,
    due_run_ids,
    get_run,
    get_runs,
    get_step,
    list_steps,
    signals,
)
from .sqlite_rows import (
    RUN_COLUMNS,
    STEP_COLUMNS,
    event_from_row,
    from_ts,
    placeholders,
    run_from_row,
    run_values,
    step_values,
    ts,
)

_REQUEUEABLE = (RunStatus.FAILED, RunStatus.DEAD, RunStatus.CANCELLED)
# A run its throttle or debounce no longer holds (given now): only such a run waits for a slot.
_BEGUN = "(begin_at IS NULL OR begin_at <= ?)"

# ---------------------------------------------------------------- rows


def _existing(conn: Conn, run_id: str) -> Run:
    run = get_run(conn, run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    return run


def _insert_run(conn: Conn, run: Run) -> None:
    values = run_values(run)
    conn.execute(f"INSERT INTO runs ({RUN_COLUMNS}) VALUES {placeholders(values)}", values)


_UPDATE_RUN = "UPDATE runs SET {} WHERE id = ?".format(
    ", ".join(f"{column.strip()} = ?" for column in RUN_COLUMNS.split(","))
)


def _save_run(conn: Conn, run: Run) -> None:
    """Write every column of ``run`` over its row (read-modify-write inside the transaction)."""
    conn.execute(_UPDATE_RUN, (*run_values(run), run.id))


def _save_step(conn: Conn, record: StepRecord) -> None:
    values = step_values(record)
    conn.execute(f"REPLACE INTO steps ({STEP_COLUMNS}) VALUES {placeholders(values)}", values)


# ---------------------------------------------------------------- starts


def create_runs(
    conn: Conn, specs: Sequence[RunSpec], now: datetime, lease: Lease | None = None
) -> list[Started]:
    check_lease(specs, lease)
    return [create(conn, spec, now, lease=lease) for spec in specs]


def create(
    conn: Conn, spec: RunSpec, now: datetime, *, gated: bool = True, lease: Lease | None = None
) -> Started:
    existing = get_run(conn, spec.id)
    if existing is not None:
        return Started(existing, created=False)
    limited = gated and spec.limited
    held = _held_of(conn, spec, now) if limited else None
    if held is not None:
        return _fold(conn, held, spec, now)
    last = _rate_last(conn, spec) if limited else None
    if gated:
        refusal = _refusal(conn, spec, now, last)
        if refusal is not None:
            return Started(None, created=False, rejected=refusal)
        if spec.singleton is not None and spec.singleton.replace:
            for other_id in _active_ids_of_key(conn, spec.singleton.key):
                cancel_one(conn, _existing(conn, other_id), now, None)
    run = run_from_spec(spec)
    if limited:
        run = held_run(run, spec, *admission.start_times(spec, last, now))
    ahead = _ahead(conn, spec, now)
    waiting = gated and (run.held(now) or admission.waits_at_start(spec.singleton, ahead))
    claim = None
    if lease is not None and admission.claimed_at_start(spec.singleton, waiting):
        claim = Claim(leased_run(run, lease), [], [])
    _insert_run(conn, claim.run if claim is not None else run)
    return Started(run, created=True, waiting=waiting, claim=claim)


def _held_of(conn: Conn, spec: RunSpec, now: datetime) -> Run | None:
    """The held run of the spec's debounce key a start folds into, if there is one."""
    if spec.debounce is None:
        return None
    row = conn.execute(
        "SELECT * FROM runs WHERE debounce_key = ? AND status = 'blocked' AND begin_at > ?"
        " ORDER BY begin_at DESC, id DESC LIMIT 1",
        (spec.debounce.key, ts(now)),
    ).fetchone()
    return None if row is None else run_from_row(row)


def _fold(conn: Conn, held: Run, spec: RunSpec, now: datetime) -> Started:
    assert spec.debounce is not None
    folded = debounced_run(held, spec, admission.refolded_begin(spec.debounce, held, now), now)
    _save_run(conn, folded)
    return Started(folded, created=False, debounced=True)


def _rate_last(conn: Conn, spec: RunSpec) -> datetime | None:
    """The ``limit``-th most recent instant the spec's rate key counted a start at."""
    if spec.rate is None:
        return None
    row = conn.execute(
        "SELECT rate_at FROM runs WHERE rate_key = ? ORDER BY rate_at DESC LIMIT 1 OFFSET ?",
        (spec.rate.key, spec.rate.limit - 1),
    ).fetchone()
    return None if row is None else from_ts(row["rate_at"])


def _ahead(conn: Conn, spec: RunSpec, now: datetime) -> int:
    """Runs ahead of a new one of ``spec``'s singleton key: holders, and waiters not cancelling
    (nor held: see ``_admit``)."""
    if spec.singleton is None:
        return 0
    (count,) = conn.execute(
        f"SELECT COUNT(*) FROM runs WHERE singleton_key = ? AND status IN {ACTIVE}"
        f" AND (holds_slot OR (status <> 'cancelling' AND {_BEGUN}))",
        (spec.singleton.key, ts(now)),
    ).fetchone()
    return int(count)


def _refusal(
    conn: Conn, spec: RunSpec, now: datetime, last: datetime | None = None
) -> Exception | None:
    refusal: Exception | None = admission.rate_refusal(spec.workflow, spec.rate, last, now)
    if refusal is not None:
        return refusal
    if spec.quota is not None:
        counted = sorted(spec.quota.count_statuses)
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM runs WHERE concurrency_key = ?"
            f" AND status IN {placeholders(counted)}",
            (spec.quota.key, *counted),
        ).fetchone()
        refusal = admission.quota_refusal(spec.workflow, spec.quota, count)
        if refusal is not None:
            return refusal
    if spec.singleton is not None:
        active = len(_active_ids_of_key(conn, spec.singleton.key))
        return admission.queue_refusal(spec.workflow, spec.singleton, active)
    return None


def _active_ids_of_key(conn: Conn, key: str) -> list[str]:
    rows = conn.execute(
        f"SELECT id FROM runs WHERE singleton_key = ? AND status IN {ACTIVE}"
        " ORDER BY created_at, id",
        (key,),
    )
    return [row["id"] for row in rows]


# ---------------------------------------------------------------- claims


def _claimable(conn: Conn, run_id: str, now: datetime, handoff: bool) -> Run | None:
    row = conn.execute(
        "SELECT * FROM runs WHERE id = ? AND (status = 'pending'"
        f" OR (status IN {WAITING} AND (? OR wake_at <= ?))"
        f" OR (status IN {LEASED} AND lease_expires_at <= ?))",
        (run_id, int(handoff), ts(now), ts(now)),
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
) -> ClaimOutcome:
    run = _claimable(conn, run_id, now, handoff)
    if run is None:
        return ClaimOutcome()
    if run.status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        run = replace(run, recoveries=run.recoveries + 1)
        _save_run(conn, run)
        if run.status == RunStatus.CANCELLING:
            cancelled = Settlement(RunStatus.CANCELLED, None, run.error)
            return ClaimOutcome(settled=finish(conn, run, cancelled, now))
        dead = dead_settlement(run.recoveries, max_recoveries)
        if dead is not None and run.workflow in dead_letters:
            return ClaimOutcome(claim=_lease(conn, run, owner, lease_until, now), dying=True)
        if dead is not None:
            return ClaimOutcome(settled=finish(conn, run, dead, now))
        if run.queued:  # the slots its lost turn held go (its replay asks again)
            queues.release(_book(conn), run_id, None, now, admitted_only=True)
    released = None
    if run.singleton_key is not None and not run.holds_slot:
        if not _admit(conn, run, now):
            _save_run(conn, blocked_run(run, singleton_retry, now))
            return ClaimOutcome(parked=True)
        released = run.handoff_at
        run = replace(run, holds_slot=True, admission_retries=0, handoff_at=None)
    return ClaimOutcome(claim=_lease(conn, run, owner, lease_until, now), handed_off_at=released)


def _admit(conn: Conn, run: Run, now: datetime) -> bool:
    """Whether a free slot is this waiter's. Both counts stop early (the holders by their own
    index, the waiters ahead at the free slots): a denial costs the same however many wait.
    A run its throttle or debounce still holds is no waiter yet, and so never ahead."""
    limit = run.singleton_limit or 1
    (holders,) = conn.execute(
        "SELECT COUNT(*) FROM runs WHERE singleton_key = ? AND holds_slot", (run.singleton_key,)
    ).fetchone()
    free = admission.free_slots(limit, holders)
    if free == 0:
        return False
    (ahead,) = conn.execute(
        "SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE singleton_key = ? AND NOT holds_slot"
        f" AND status IN {WAITERS} AND {_BEGUN} AND (created_at, id) < (?, ?)"
        " ORDER BY created_at, id LIMIT ?)",
        (run.singleton_key, ts(now), ts(run.created_at), run.id, free),
    ).fetchone()
    return admission.admits(limit, holders, ahead)


def _lease(conn: Conn, run: Run, owner: str, lease_until: datetime, now: datetime) -> Claim:
    leased = replace(
        run,
        status=RunStatus.RUNNING,
        lease_owner=owner,
        lease_expires_at=lease_until,
        wake_at=None,
        wake_requested_at=None,
        updated_at=now,
    )
    _save_run(conn, leased)
    return Claim(leased, list_steps(conn, run.id), signals(conn, run.id))


def renew_leases(conn: Conn, leases: dict[str, str], lease_until: datetime) -> set[str]:
    kept: set[str] = set()
    for run_id, owner in leases.items():
        cursor = conn.execute(
            "UPDATE runs SET lease_expires_at = ?"
            f" WHERE id = ? AND lease_owner = ? AND status IN {LEASED}",
            (ts(lease_until), run_id, owner),
        )
        if cursor.rowcount == 1:
            kept.add(run_id)
    return kept


def hand_off_due_runs(
    conn: Conn, now: datetime, limit: int, namespace: str | None, hold_until: datetime
) -> list[Run]:
    # Inside BEGIN IMMEDIATE no other writer can take the same rows between read and write.
    ids = due_run_ids(conn, now, limit, namespace)
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
) -> str:
    record = get_step(conn, run_id, seq)
    verdict = report_verdict(get_run(conn, run_id), record, attempt)
    if verdict == "recorded" and record is not None:
        _save_step(conn, reported_step(record, ok, output, error, now))
        if _existing(conn, run_id).queued:
            queues.release(_book(conn), run_id, [seq], now)
    if verdict != "dropped":
        _wake(conn, run_id, now)
    return verdict


def record_heartbeat(conn: Conn, run_id: str, seq: int, attempt: int, at: datetime) -> bool:
    cursor = conn.execute(
        "UPDATE steps SET last_heartbeat_at = ?"
        " WHERE run_id = ? AND seq = ? AND status = ? AND attempts = ?"
        f" AND EXISTS (SELECT 1 FROM runs WHERE id = steps.run_id AND status IN {ACTIVE})",
        (ts(at), run_id, seq, str(StepStatus.RUNNING), attempt),
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
) -> None:
    run = _fenced(conn, run_id, owner)
    parked = replace(
        run,
        status=RunStatus.SUSPENDED,
        awaiting_decision_task_id=task_id,
        wake_at=deadline,
        lease_owner=None,
        lease_expires_at=None,
        updated_at=now,
    )
    _save_run(conn, parked)


def claim_decision(
    conn: Conn, run_id: str, task_id: str, owner: str, now: datetime, lease_until: datetime
) -> Claim | None:
    run = get_run(conn, run_id)
    if run is None or not _awaiting(run, task_id):
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
        _save_run(conn, replace(run, wake_at=deadline))
    return True


def _fenced(conn: Conn, run_id: str, owner: str, *, allow_cancelling: bool = False) -> Run:
    run = get_run(conn, run_id)
    leased = run is not None and run.status in (RunStatus.RUNNING, RunStatus.CANCELLING)
    if run is None or not leased or run.lease_owner != owner:
        raise LeaseLostError(f"lease on run {run_id!r} is no longer held by {owner}")
    if run.status == RunStatus.CANCELLING and not allow_cancelling:
        raise RunCancelling(f"run {run_id!r} was cancelled")
    return run


def _apply(conn: Conn, run_id: str, writes: Writes, now: datetime) -> list[Started]:
    for record in writes.steps:
        _save_step(conn, record)
    consumed = list(writes.consumed_signals)
    conn.execute(
        f"DELETE FROM signals WHERE run_id = ? AND id IN {placeholders(consumed)}",
        (run_id, *consumed),
    )
    return [create(conn, spec, now) for spec in writes.children]


def checkpoint(conn: Conn, run_id: str, owner: str, writes: Writes, now: datetime) -> list[Started]:
    _fenced(conn, run_id, owner)
    started = _apply(conn, run_id, writes, now)
    conn.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (ts(now), run_id))
    return started


def suspend_run(
    conn: Conn, run_id: str, owner: str, writes: Writes, wake_at: datetime | None, now: datetime
) -> bool:
    _fenced(conn, run_id, owner)
    _apply(conn, run_id, writes, now)
    run = _existing(conn, run_id)
    rewake = run.wake_requested_at is not None
    suspended = replace(
        run,
        status=RunStatus.SUSPENDED,
        wake_at=now if rewake else wake_at,
        wake_requested_at=None,
        lease_owner=None,
        lease_expires_at=None,
        updated_at=now,
    )
    _save_run(conn, suspended)
    return rewake


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
    woken: list[str] = []
    settled = finish(conn, _existing(conn, run_id), settlement, now, woken)
    if settlement.continue_as is not None:
        started = create(conn, settlement.continue_as, now, gated=False)
        if started.created:
            woken.append(settlement.continue_as.id)
        successor = None
    handler = None
    if settlement.handler is not None:
        handler = create(conn, settlement.handler, now)
        refused = refused_handler(settled, handler)
        if refused is not None:
            _save_run(conn, refused)
        woken.extend(ready_ids([handler]))
        successor = None
    claim = _hand_over(conn, settled, woken, successor, now) if run.holds_slot else None
    woken = [w for w in woken if claim is None or w != claim.run.id]
    return SettleResult(woken, claim, handler)


def _hand_over(
    conn: Conn, settled: Run, woken: list[str], successor: Lease | None, now: datetime
) -> Claim | None:
    """Lease the oldest waiter the release admitted to ``successor``, if it is not leased."""
    if successor is None or settled.singleton_key is None:
        return None
    for run_id in woken:
        waiter = _existing(conn, run_id)
        if waiter.singleton_key != settled.singleton_key:
            continue
        if waiter.status not in (RunStatus.PENDING, RunStatus.SUSPENDED, RunStatus.BLOCKED):
            return None
        heir = replace(waiter, holds_slot=True, handoff_at=None)
        return _lease(conn, heir, successor.owner, successor.until, now)
    return None


def finish(
    conn: Conn, run: Run, settlement: Settlement, now: datetime, woken: list[str] | None = None
) -> Run:
    """Settle ``run`` terminal: release its slot, wake the waiters for it and its parent."""
    woken = [] if woken is None else woken
    done = settled_run(run, settlement, now)
    _save_run(conn, done)
    conn.execute("DELETE FROM signals WHERE run_id = ?", (run.id,))
    if run.holds_slot and run.singleton_key is not None:
        woken.extend(_wake_waiters(conn, run.singleton_key, run.singleton_limit or 1, now))
    if run.parent_id is not None and _wake(conn, run.parent_id, now):
        woken.append(run.parent_id)
    if run.queued:
        woken.extend(queues.release(_book(conn), run.id, None, now))
    return done


def _wake_waiters(conn: Conn, key: str, limit: int, now: datetime) -> list[str]:
    (holders,) = conn.execute(
        f"SELECT COUNT(*) FROM runs WHERE singleton_key = ? AND status IN {ACTIVE} AND holds_slot",
        (key,),
    ).fetchone()
    rows = conn.execute(
        f"SELECT id FROM runs WHERE singleton_key = ? AND status IN {ACTIVE}"
        f" AND NOT holds_slot AND status != 'cancelling' AND {_BEGUN}"
        " ORDER BY created_at, id LIMIT ?",
        (key, ts(now), admission.free_slots(limit, holders)),
    )
    chosen = [row["id"] for row in rows]
    for waiter_id in chosen:
        _wake(conn, waiter_id, now)
    conn.execute(
        "UPDATE runs SET handoff_at = ? WHERE id IN (SELECT value FROM json_each(?))",
        (ts(now), dumps(chosen)),
    )
    return chosen


def _wake(conn: Conn, run_id: str, now: datetime) -> bool:
    run = get_run(conn, run_id)
    if run is None or run.is_terminal:
        return False
    stamp = ts(now)
    if _awaiting(run):
        conn.execute("UPDATE runs SET wake_requested_at = ? WHERE id = ?", (stamp, run_id))
        return False
    conn.execute(
        f"UPDATE runs SET wake_at = ?, updated_at = ? WHERE id = ? AND status IN {WAITING}",
        (stamp, stamp, run_id),
    )
    conn.execute(
        f"UPDATE runs SET wake_requested_at = ? WHERE id = ? AND status IN {LEASED}",
        (stamp, run_id),
    )
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
    woken = queues.release(book, run_id, release, now) if release else []
    return queues.admitted(queues.admit(book, run_id, request, now, retry), woken)


def release_steps(
    conn: Conn, run_id: str, owner: str, writes: Writes, seqs: Sequence[int], now: datetime
) -> list[str]:
    _fenced(conn, run_id, owner)
    _apply(conn, run_id, writes, now)
    return queues.release(_book(conn), run_id, seqs, now)


# ---------------------------------------------------------------- from outside a turn


def deliver_signal(conn: Conn, run_id: str, name: str, payload: object, now: datetime) -> bool:
    run = _existing(conn, run_id)
    if run.is_terminal:
        raise RunFinishedError(run_id, run.status)
    conn.execute(
        "INSERT INTO signals (run_id, name, payload, created_at) VALUES (?, ?, ?, ?)",
        (run_id, name, dumps(payload), ts(now)),
    )
    if _waits_for(conn, run_id, StepKind.SIGNAL, name):
        return _wake(conn, run_id, now)
    if run.status in (RunStatus.RUNNING, RunStatus.CANCELLING) or _awaiting(run):
        _wake(conn, run_id, now)  # the turn in flight (here or on a worker) may have missed it
    return False


def _waits_for(conn: Conn, run_id: str, kind: StepKind, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM steps WHERE run_id = ? AND kind = ? AND name = ? AND status = ?",
        (run_id, str(kind), name, str(StepStatus.PENDING)),
    ).fetchone()
    return row is not None


def cancel_run(
    conn: Conn, run_id: str, now: datetime, error: dict[str, object] | None
) -> list[str]:
    _existing(conn, run_id)
    changed: list[str] = []
    for target_id in [run_id, *_descendant_ids(conn, run_id)]:
        if cancel_one(conn, _existing(conn, target_id), now, error):
            changed.append(target_id)
    return changed


def _descendant_ids(conn: Conn, run_id: str) -> list[str]:
    rows = conn.execute(
        "WITH RECURSIVE tree(id) AS ("
        " SELECT id FROM runs WHERE parent_id = ?"
        " UNION SELECT runs.id FROM runs JOIN tree ON runs.parent_id = tree.id)"
        " SELECT id FROM tree",
        (run_id,),
    )
    return [row["id"] for row in rows]


def cancel_one(conn: Conn, run: Run, now: datetime, error: dict[str, object] | None) -> bool:
    if run.is_terminal or run.status == RunStatus.CANCELLING:
        return False
    if run.status == RunStatus.RUNNING:
        _save_run(conn, replace(run, status=RunStatus.CANCELLING, updated_at=now, error=error))
    else:
        finish(conn, run, Settlement(RunStatus.CANCELLED, None, error), now)
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
    refusal = _refusal(conn, requeue_spec(run, quota, singleton), now)
    if refusal is not None:
        raise refusal
    conn.execute(
        "DELETE FROM steps WHERE run_id = ? AND status != ?", (run_id, str(StepStatus.COMPLETED))
    )
    requeued = requeued_run(run, now, deadline_at)
    _save_run(conn, requeued)
    return requeued


def publish_event(
    conn: Conn, name: str, payload: object, event_id: str | None, now: datetime
) -> tuple[Event, bool, list[str]]:
    if event_id is not None:
        row = conn.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone()
        if row is not None:
            return event_from_row(row), False, []
    cursor = conn.execute(
        "INSERT INTO events (id, name, payload, created_at) VALUES (?, ?, ?, ?)",
        (event_id, name, dumps(payload), ts(now)),
    )
    assert cursor.lastrowid is not None
    event = Event(cursor.lastrowid, name, payload, now, event_id)
    waiting = _ids_waiting_for(conn, StepKind.EVENT, name)
    return event, True, [run_id for run_id in waiting if _wake(conn, run_id, now)]


def _ids_waiting_for(conn: Conn, kind: StepKind, name: str) -> list[str]:
    rows = conn.execute(
        "SELECT DISTINCT runs.id FROM steps JOIN runs ON runs.id = steps.run_id"
        " WHERE steps.kind = ? AND steps.name = ? AND steps.status = ?"
        " ORDER BY runs.created_at, runs.id",
        (str(kind), name, str(StepStatus.PENDING)),
    )
    return [row["id"] for row in rows]


# ---------------------------------------------------------------- reads

__all__ = [
    "cancel_run",
    "checkpoint",
    "claim_run",
    "create_runs",
    "deliver_signal",
    "hand_off_due_runs",
    "publish_event",
    "record_heartbeat",
    "record_step_result",
    "renew_leases",
    "requeue_run",
    "settle_run",
    "suspend_run",
]
