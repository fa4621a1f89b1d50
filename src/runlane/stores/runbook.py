"""A start, a claim and a settlement, for the stores that read and write whole run records.

The memory and SQLite stores decide these in Python, inside their one atomic unit (one event
loop step; one ``BEGIN IMMEDIATE`` transaction): the same steps in the same order, over their own
records (a :class:`RunRows`). PostgreSQL states the same decisions in its statements.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from .. import admission
from ..models import (
    Claim,
    ClaimOutcome,
    Lease,
    RetryTimer,
    Run,
    RunSpec,
    RunStatus,
    Serves,
    Settlement,
    SettleResult,
    Started,
    StepRecord,
    admitted_run,
    blocked_run,
    dead_settlement,
    debounced_run,
    held_run,
    leased_run,
    ready_ids,
    refused_handler,
    run_from_spec,
    serves_run,
    settled_run,
    suspended_run,
    waiting_run,
)

_WAITING = (RunStatus.SUSPENDED, RunStatus.BLOCKED)


class RunRows(Protocol):
    """A store's run records, read and written inside the caller's atomic unit."""

    def get(self, run_id: str) -> Run:
        """The run ``run_id``, which exists."""

    def find(self, run_id: str) -> Run | None:
        """The run ``run_id``, or None."""

    def insert(self, run: Run) -> None:
        """Write a new run."""

    def insert_new(self, run: Run) -> bool:
        """Write ``run`` unless a run of its id exists; whether it was written."""

    def insert_steps(self, records: Sequence[StepRecord]) -> None:
        """Write the step records of a run just inserted (a fork's copied history)."""

    def held_of(self, debounce_key: str, now: datetime) -> Run | None:
        """The latest run of the debounce key that is still held (a start folds into it)."""

    def rate_last(self, rate_key: str, limit: int) -> datetime | None:
        """The ``limit``-th most recent instant the rate key counted a start at, or None."""

    def quota_count(self, key: str, statuses: Collection[RunStatus]) -> int:
        """How many runs of the quota key are in one of ``statuses``."""

    def active_ids_of_key(self, key: str) -> list[str]:
        """The unfinished runs of the singleton key, oldest first."""

    def cancel(self, run: Run, now: datetime) -> None:
        """Cancel ``run`` (``Store.cancel_run`` for one run, without an error)."""

    def save(self, run: Run, before: Run | None = None) -> None:
        """Write ``run`` over its record; ``before``, when given, is the record as stored (a
        store may then write only what ``run`` changes)."""

    def create(self, spec: RunSpec, now: datetime, *, gated: bool) -> Started:
        """Create the run of ``spec`` (``Store.create_runs``; admission only when ``gated``)."""

    def drop_signals(self, run_id: str) -> None:
        """Delete the run's undelivered signals."""

    def wake_waiters(self, key: str, limit: int, now: datetime) -> list[str]:
        """Wake the singleton waiters a released slot of ``key`` admits, oldest first, stamping
        their hand-off; their ids."""

    def wake(self, run_id: str, now: datetime) -> bool:
        """Make a waiting run due now (or note the wake on a leased one); whether it was woken."""

    def lease(self, run: Run, lease: Lease, now: datetime) -> Claim:
        """Lease ``run`` (``models.claimed_run``) and read its step records and signals."""

    def holders(self, key: str) -> int:
        """How many runs hold a slot of the singleton key."""

    def admits(self, run: Run, now: datetime) -> bool:
        """Whether a free slot of its singleton key is this waiter's: fewer runs are ahead of
        it (holders, and waiters before it in FIFO order, neither cancelling nor held) than its
        limit. ``run`` need not be written yet."""

    def release_queue(self, run_id: str, now: datetime, *, lost_turn: bool) -> list[str]:
        """Free the run's step queue entries (``step_queues.release``); the ids of the runs woken."""


@dataclass(frozen=True, slots=True)
class ClaimRules:
    """What the engine asks of a claim: see ``Store.claim_run``."""

    singleton_retry: RetryTimer
    max_recoveries: int | None
    dead_letters: Collection[str]
    serves: Serves | None = None


def create(
    rows: RunRows, spec: RunSpec, now: datetime, *, gated: bool = True, lease: Lease | None = None
) -> Started:
    """Start the run of ``spec`` (see ``Store.create_runs``): an existing id stays; a held
    debounced run absorbs the start; the gates may refuse it; ``lease`` claims it at once when
    it need not wait."""
    if not spec.gated:
        return _insert_ungated(rows, spec, lease)
    if not _writes_or_refuses(spec, gated):  # an existing id is found by the insert itself
        return _insert(rows, spec, now, None, gated=gated, lease=lease, new_only=True)
    existing = rows.find(spec.id)
    if existing is not None:
        return Started(existing, created=False)
    limited = gated and spec.limited
    held = rows.held_of(spec.debounce.key, now) if limited and spec.debounce else None
    if held is not None:
        return _fold(rows, held, spec, now)
    last = rows.rate_last(spec.rate.key, spec.rate.limit) if limited and spec.rate else None
    if gated:
        refused = refusal(rows, spec, now, last)
        if refused is not None:
            return Started(None, created=False, rejected=refused)
        if spec.singleton is not None and spec.singleton.replace:
            for other_id in rows.active_ids_of_key(spec.singleton.key):
                rows.cancel(rows.get(other_id), now)
    return _insert(rows, spec, now, last, gated=gated, lease=lease)


def _insert_ungated(rows: RunRows, spec: RunSpec, lease: Lease | None) -> Started:
    """A start no gate applies to, as ``_insert`` makes it, in one write: the insert finds an
    existing run of the id (then it stays, read back) rather than a read before it."""
    run = run_from_spec(spec)
    claim = None if lease is None else Claim(leased_run(run, lease), [], [])
    if not rows.insert_new(run if claim is None else claim.run):
        return Started(rows.get(spec.id), created=False)
    if spec.history:
        rows.insert_steps(spec.history)
    return Started(run, created=True, waiting=False, claim=claim)


def _writes_or_refuses(spec: RunSpec, gated: bool) -> bool:
    """Whether the start may write before its insert (a debounce folds, a replacing start
    cancels) or refuse it (a rate limit, a quota, a bounded queue): then a run of its id must
    be looked for first, since that run stands instead. Otherwise the insert finds it."""
    if not gated:
        return False
    gate = spec.singleton
    return (
        spec.limited
        or spec.quota is not None
        or (gate is not None and (gate.replace or gate.max_queue_depth is not None))
    )


def _fold(rows: RunRows, held: Run, spec: RunSpec, now: datetime) -> Started:
    assert spec.debounce is not None
    folded = debounced_run(held, spec, admission.refolded_begin(spec.debounce, held, now), now)
    rows.save(folded)
    return Started(folded, created=False, debounced=True)


def _insert(
    rows: RunRows,
    spec: RunSpec,
    now: datetime,
    last: datetime | None,
    *,
    gated: bool,
    lease: Lease | None,
    new_only: bool = False,
) -> Started:
    """The new run of ``spec``, admitted, parked or held; with ``new_only``, a run of its id
    already stored stays instead (nothing is written)."""
    run = run_from_spec(spec)
    if gated and spec.limited:
        run = held_run(run, spec, *admission.start_times(spec, last, now))
    retry = _parked_for(rows, spec, run, now) if gated else None
    if retry is not None:
        run = waiting_run(run, retry, now)
    waiting = gated and (run.held(now) or retry is not None)
    claim = None
    if lease is not None and admission.claimed_at_start(spec.singleton, waiting):
        claim = Claim(leased_run(run, lease), [], [])
    written = claim.run if claim is not None else run
    if not new_only:
        rows.insert(written)
    elif not rows.insert_new(written):
        return Started(rows.get(spec.id), created=False)
    if spec.history:
        rows.insert_steps(spec.history)
    return Started(run, created=True, waiting=waiting, claim=claim)


def _parked_for(rows: RunRows, spec: RunSpec, run: Run, now: datetime) -> float | None:
    """The fallback delay of a new run that a claim now would only park (a singleton run
    behind a full key that neither replaces nor is held), or None: it is created parked."""
    gate = spec.singleton
    if gate is None or gate.replace or run.held(now) or rows.admits(run, now):
        return None
    return gate.retry


def refusal(
    rows: RunRows, spec: RunSpec, now: datetime, last: datetime | None = None
) -> Exception | None:
    """Why the gates of ``spec`` refuse its start now (rate, quota, singleton queue), or None."""
    refused: Exception | None = admission.rate_refusal(spec.workflow, spec.rate, last, now)
    if refused is not None:
        return refused
    if spec.quota is not None:
        count = rows.quota_count(spec.quota.key, spec.quota.count_statuses)
        refused = admission.quota_refusal(spec.workflow, spec.quota, count)
        if refused is not None:
            return refused
    if spec.singleton is not None and spec.singleton.max_queue_depth is not None:
        active = len(rows.active_ids_of_key(spec.singleton.key))
        return admission.queue_refusal(spec.workflow, spec.singleton, active)
    return None


def park_full_waiters(rows: RunRows, timers: Mapping[str, RetryTimer], now: datetime) -> list[str]:
    """Park again the due waiters of ``timers`` whose key has every slot held (see
    ``Store.park_full_waiters``); their ids."""
    parked = []
    for run_id, timer in timers.items():
        run = rows.find(run_id)
        if run is not None and _due_waiter(run, now) and _full(rows, run):
            rows.save(blocked_run(run, timer, now))
            parked.append(run_id)
    return parked


def _due_waiter(run: Run, now: datetime) -> bool:
    return (
        run.status == RunStatus.BLOCKED
        and run.singleton_key is not None
        and not run.holds_slot
        and run.lease_owner is None
        and run.wake_at is not None
        and run.wake_at <= now
        and not run.held(now)
    )


def _full(rows: RunRows, run: Run) -> bool:
    assert run.singleton_key is not None
    return rows.holders(run.singleton_key) >= (run.singleton_limit or 1)


def claim(rows: RunRows, run: Run, lease: Lease, now: datetime, rules: ClaimRules) -> ClaimOutcome:
    """Claim ``run``, claimable at ``now``: recover it if its lease expired, admit it if it
    waits for a slot of its key, and lease it; or settle it, or park it blocked. A run of a
    code the claimer does not serve is left as it is."""
    if not serves_run(rules.serves, run):
        return ClaimOutcome(unserved=True)
    if run.pause_requested_at is not None and run.status != RunStatus.CANCELLING:
        # Asked to pause while a turn held it, which ended before its next write: paused now.
        rows.save(suspended_run(run, run.wake_at, now), run)
        return ClaimOutcome()
    if run.status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        run = replace(run, recoveries=run.recoveries + 1)
        rows.save(run)
        ended = _recovered(rows, run, lease, now, rules)
        if ended is not None:
            return ended
    released = None
    if run.singleton_key is not None and not run.holds_slot:
        if not rows.admits(run, now):
            rows.save(blocked_run(run, rules.singleton_retry, now))
            return ClaimOutcome(parked=True)
        released = run.handoff_at
        run = admitted_run(run)
    return ClaimOutcome(claim=rows.lease(run, lease, now), handed_off_at=released)


def _recovered(
    rows: RunRows, run: Run, lease: Lease, now: datetime, rules: ClaimRules
) -> ClaimOutcome | None:
    """The outcome for a run whose lease expired, when the claim ends there (None: go on)."""
    if run.status == RunStatus.CANCELLING:
        cancelled = Settlement(RunStatus.CANCELLED, None, run.error)
        return ClaimOutcome(settled=finish(rows, run, cancelled, now, []))
    dead = dead_settlement(run.recoveries, rules.max_recoveries)
    if dead is not None and run.workflow in rules.dead_letters:
        return ClaimOutcome(claim=rows.lease(run, lease, now), dying=True)
    if dead is not None:
        return ClaimOutcome(settled=finish(rows, run, dead, now, []))
    if run.queued:  # the slots its lost turn held go (its replay asks again)
        rows.release_queue(run.id, now, lost_turn=True)
    return None


def settle(
    rows: RunRows, run: Run, settlement: Settlement, now: datetime, successor: Lease | None
) -> SettleResult:
    """Settle ``run`` (fenced, its turn's writes applied): finish it, start what it continues
    as and its failure handler, and hand its slot to ``successor`` (see ``Store.settle_run``)."""
    woken: list[str] = []
    if not run.holds_slot:
        successor = None  # nothing released, nobody to hand over to
    settled = finish(rows, run, settlement, now, woken)
    if settlement.continue_as is not None:
        started = rows.create(settlement.continue_as, now, gated=False)
        if started.created:
            woken.append(settlement.continue_as.id)
        successor = None
    handler = None
    if settlement.handler is not None:
        handler = rows.create(settlement.handler, now, gated=True)
        refused = refused_handler(settled, handler)
        if refused is not None:
            rows.save(refused)
        woken.extend(ready_ids([handler]))
        successor = None
    claim = _hand_over(rows, settled, woken, successor, now)
    woken = [w for w in woken if claim is None or w != claim.run.id]
    return SettleResult(woken, claim, handler)


def finish(rows: RunRows, run: Run, settlement: Settlement, now: datetime, woken: list[str]) -> Run:
    """Settle ``run`` (as stored) terminal: release its slot, wake the waiters for the key's
    free slots and its parent, free its step queue entries; the ids woken go to ``woken``.

    The waiters are woken after a waiter too: it may have been woken for a slot it now will
    not take, and the next one would wait for its fallback timer. With no slot free, nobody
    is woken."""
    done = settled_run(run, settlement, now)
    rows.save(done, run)
    rows.drop_signals(run.id)
    if run.singleton_key is not None:
        woken.extend(rows.wake_waiters(run.singleton_key, run.singleton_limit or 1, now))
    if run.parent_id is not None and rows.wake(run.parent_id, now):
        woken.append(run.parent_id)
    if run.queued:
        woken.extend(rows.release_queue(run.id, now, lost_turn=False))
    return done


def _hand_over(
    rows: RunRows, settled: Run, woken: list[str], successor: Lease | None, now: datetime
) -> Claim | None:
    """Lease the oldest waiter the release admitted to ``successor``, if it is not leased."""
    key = settled.singleton_key
    if successor is None or key is None:
        return None
    waiter = next((w for w in map(rows.get, woken) if w.singleton_key == key), None)
    if waiter is None or waiter.status not in (RunStatus.PENDING, *_WAITING):
        return None
    if not serves_run(successor.serves, waiter):
        return None  # woken: an engine that serves it claims it
    return rows.lease(replace(waiter, holds_slot=True, handoff_at=None), successor, now)


__all__ = ["ClaimRules", "RunRows", "claim", "create", "finish", "refusal", "settle"]
