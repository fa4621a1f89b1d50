"""MemoryStore: the whole store contract in process memory, for tests and one-off scripts.

Every method runs without awaiting in between, so each is atomic on the event loop.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from .. import admission, step_queues
from ..activity import ActivityCount, latency_bucket, minute_of
from ..attributes import AttributeValue
from ..errors import (
    LeaseLostError,
    RunCancelling,
    RunFinishedError,
    RunNotFoundError,
    RunPausing,
    not_requeueable,
)
from ..lanes import members_of, of_lane_key
from ..models import (
    ACTIVE_STATUSES,
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
    StepStatus,
    StoredSchedule,
    WindowFire,
    Writes,
    awaiting_decision,
    buffered_name,
    cancel_result,
    cancelling_run,
    claimed_run,
    evolved,
    leaves_line,
    older_fence,
    pausable,
    paused_run,
    requeue_spec,
    requeued_run,
    resumable,
    resumed_run,
    serves_run,
    suspended_run,
)
from ..step_queues import QueueEntry, QueueRequest, QueueRow, QueueView, order_key, views_of
from . import runbook
from .base import check_lease, offered
from .runbook import ClaimRules

_LEASED = (RunStatus.RUNNING, RunStatus.CANCELLING)
_WAITING = (RunStatus.SUSPENDED, RunStatus.BLOCKED)


class MemoryStore:
    """An in-memory store. Not shared between processes; lost when the process ends."""

    atomic_admission = True

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        self._steps: dict[str, dict[int, StepRecord]] = {}
        self._signals: dict[str, list[Signal]] = {}
        self._events: list[Event] = []
        self._event_ids: dict[str, Event] = {}
        self._last_event_seq = 0
        self._ids = itertools.count(1)
        self._schedules: dict[str, StoredSchedule] = {}
        self._queues = _MemoryQueues(self)
        self._engines: dict[str, EngineInfo] = {}
        self._audit: list[AuditEntry] = []

    @classmethod
    def from_url(cls, url: str) -> MemoryStore:
        return cls()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    # ---------------------------------------------------------------- starts

    async def create_runs(
        self,
        specs: Sequence[RunSpec],
        now: datetime,
        *,
        lease: Lease | None = None,
        claims: int = 1,
    ) -> list[Started]:
        check_lease(specs, lease, claims)
        leases = offered(specs, lease, claims)
        return [self._create(s, now, lease=o) for s, o in zip(specs, leases, strict=True)]

    def _create(
        self, spec: RunSpec, now: datetime, *, gated: bool = True, lease: Lease | None = None
    ) -> Started:
        return runbook.create(_Rows(self), spec, now, gated=gated, lease=lease)

    def _active_of_key(self, key: str) -> list[Run]:
        runs = [r for r in self._runs.values() if r.singleton_key == key and not r.is_terminal]
        return sorted(runs, key=lambda r: (r.created_at, r.id))

    # ---------------------------------------------------------------- claims

    def _polled(self, namespace: str | None, serves: Serves | None) -> Iterator[Run]:
        """The runs a claim query of ``namespace`` and ``serves`` looks at."""
        for run in self._runs.values():
            if (namespace is None or run.namespace == namespace) and serves_run(serves, run):
                yield run

    async def pending_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        runs = [r for r in self._polled(namespace, serves) if r.status == RunStatus.PENDING]
        runs.sort(key=lambda r: (-r.priority, r.created_at, r.id))
        return [r.id for r in runs[:limit]]

    async def due_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        runs = [
            r
            for r in self._polled(namespace, serves)
            if r.status in _WAITING and r.wake_at is not None and r.wake_at <= now
        ]
        runs.sort(key=lambda r: (r.wake_at or now, r.id))
        return [r.id for r in runs[:limit]]

    async def expired_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        runs = [
            r
            for r in self._polled(namespace, serves)
            if r.status in _LEASED and r.lease_expires_at is not None and r.lease_expires_at <= now
        ]
        runs.sort(key=lambda r: (r.lease_expires_at or now, r.id))
        return [r.id for r in runs[:limit]]

    async def timed_out_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        runs = [
            r
            for r in self._polled(namespace, serves)
            if not r.is_terminal and r.deadline_at is not None and r.deadline_at <= now
        ]
        runs.sort(key=lambda r: (r.deadline_at or now, r.id))
        return [r.id for r in runs[:limit]]

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
        run = self._runs.get(run_id)
        if run is None or not _claimable(run, now, handoff):
            if run is not None and handoff and _rearmable(run, now) and serves_run(serves, run):
                self._runs[run_id] = replace(run, wake_at=run.begin_at)
            return ClaimOutcome()
        rules = ClaimRules(singleton_retry, max_recoveries, dead_letters, serves)
        return runbook.claim(_Rows(self), run, Lease(owner, lease_until), now, rules)

    async def park_full_waiters(self, timers: Mapping[str, RetryTimer], now: datetime) -> list[str]:
        return runbook.park_full_waiters(_Rows(self), timers, now)

    def _lease(self, run: Run, lease: Lease, now: datetime) -> Claim:
        leased = claimed_run(run, lease, now)
        self._runs[run.id] = leased
        steps = sorted(self._steps.get(run.id, {}).values(), key=lambda s: s.seq)
        return Claim(leased, steps, list(self._signals.get(run.id, [])))

    def _slots_of(self, key: str, now: datetime) -> tuple[int, list[Run]]:
        """The key's slot holders, and its waiters FIFO (a cancelling or paused run never waits
        for one, nor does a run its throttle or debounce still holds: it has not begun)."""
        same_key = self._active_of_key(key)
        holders = sum(1 for r in same_key if r.holds_slot)
        waiters = [
            r
            for r in same_key
            if not r.holds_slot and r.status not in _NOT_WAITING and not r.held(now)
        ]
        return holders, waiters

    def _admit(self, run: Run, now: datetime) -> bool:
        key = run.singleton_key
        assert key is not None
        holders, waiters = self._slots_of(key, now)
        place = (run.created_at, run.id)
        rank = sum(1 for r in waiters if (r.created_at, r.id) < place)
        return admission.admits(run.singleton_limit or 1, holders, rank)

    async def hand_off_due_runs(
        self,
        now: datetime,
        limit: int,
        namespace: str | None,
        hold_until: datetime,
        *,
        serves: Serves | None = None,
    ) -> list[Run]:
        taken = []
        for run_id in await self.due_run_ids(now, limit, namespace, serves=serves):
            run = replace(self._runs[run_id], wake_at=hold_until)
            self._runs[run_id] = run
            taken.append(run)
        return taken

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
        record = self._steps.get(run_id, {}).get(seq)
        verdict = report_verdict(self._runs.get(run_id), record, attempt, fence)
        if verdict == "recorded" and record is not None:
            self._steps[run_id][seq] = reported_step(record, ok, output, error, now)
            if self._runs[run_id].queued:
                step_queues.release(self._queues, run_id, [seq], now)
        if verdict != "dropped":
            self._wake(run_id, now)
        return verdict

    async def record_heartbeat(
        self, run_id: str, seq: int, attempt: int, at: datetime, *, fence: int | None = None
    ) -> bool:
        run = self._runs.get(run_id)
        record = self._steps.get(run_id, {}).get(seq)
        if run is None or run.is_terminal or record is None:
            return False
        if record.status != StepStatus.RUNNING or record.attempts != attempt:
            return False
        if older_fence(fence, record):
            return False
        self._steps[run_id][seq] = replace(record, last_heartbeat_at=at)
        return True

    async def get_step(self, run_id: str, seq: int) -> StepRecord | None:
        return self._steps.get(run_id, {}).get(seq)

    async def renew_leases(self, leases: Mapping[str, str], lease_until: datetime) -> set[str]:
        kept: set[str] = set()
        for run_id, owner in leases.items():
            run = self._runs.get(run_id)
            if run is not None and run.lease_owner == owner and run.status in _LEASED:
                self._runs[run_id] = replace(run, lease_expires_at=lease_until)
                kept.add(run_id)
        return kept

    # ---------------------------------------------------------------- remote workflow turns

    async def await_decision(
        self, run_id: str, owner: str, task_id: str, deadline: datetime, now: datetime
    ) -> None:
        run = self._fenced(run_id, owner)
        self._runs[run_id] = awaiting_decision(run, task_id, deadline, now)
        if run.pause_requested_at is not None:
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
        run = self._runs.get(run_id)
        if run is None or not _awaiting(run) or run.awaiting_decision_task_id != task_id:
            return None
        if not serves_run(serves, run):
            return None
        requested = run.wake_requested_at
        claim = self._lease(
            replace(run, awaiting_decision_task_id=None), Lease(owner, lease_until), now
        )
        self._runs[run_id] = replace(self._runs[run_id], wake_requested_at=requested)
        return Claim(self._runs[run_id], claim.steps, claim.signals)

    async def extend_decision(self, run_id: str, task_id: str, deadline: datetime) -> bool:
        run = self._runs.get(run_id)
        if run is None or not _awaiting(run) or run.awaiting_decision_task_id != task_id:
            return False
        if run.wake_at is None or run.wake_at < deadline:
            self._runs[run_id] = replace(run, wake_at=deadline)
        return True

    # ---------------------------------------------------------------- turn writes

    def _fenced(self, run_id: str, owner: str, *, allow_cancelling: bool = False) -> Run:
        run = self._runs.get(run_id)
        if run is None or run.lease_owner != owner or run.status not in _LEASED:
            raise LeaseLostError(f"lease on run {run_id!r} is no longer held by {owner}")
        if run.status == RunStatus.CANCELLING and not allow_cancelling:
            raise RunCancelling(f"run {run_id!r} was cancelled")
        return run

    def _apply(self, run_id: str, writes: Writes, now: datetime) -> list[Started]:
        records = self._steps.setdefault(run_id, {})
        for record in writes.steps:
            records[record.seq] = record
        if writes.consumed_signals:
            consumed = set(writes.consumed_signals)
            self._signals[run_id] = [
                s for s in self._signals.get(run_id, []) if s.id not in consumed
            ]
        return [self._create(spec, now) for spec in writes.children]

    async def checkpoint(
        self, run_id: str, owner: str, writes: Writes, now: datetime
    ) -> list[Started]:
        self._fenced(run_id, owner)
        started = self._apply(run_id, writes, now)
        run = self._runs[run_id] = replace(self._runs[run_id], updated_at=now)
        if run.pause_requested_at is not None:
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
        run = self._fenced(run_id, owner)
        self._apply(run_id, writes, now)
        self._runs[run_id] = evolved(
            run, attributes={**run.attributes, **attributes}, updated_at=now
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
        self._fenced(run_id, owner)
        self._apply(run_id, writes, now)
        run = self._runs[run_id]
        # Woken during the turn, or an event a wait has not read was published meanwhile: due.
        due = run.wake_requested_at is not None or any(
            next(self._named_after(name, after), None) for name, after in writes.events
        )
        self._runs[run_id] = suspended_run(run, wake_at, now, blocked, due=due)
        return due

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
        self._fenced(run_id, owner, allow_cancelling=settlement.status == RunStatus.CANCELLED)
        self._apply(run_id, writes, now)
        return runbook.settle(_Rows(self), self._runs[run_id], settlement, now, successor)

    def _finish(
        self, run: Run, settlement: Settlement, now: datetime, woken: list[str] | None = None
    ) -> Run:
        return runbook.finish(_Rows(self), run, settlement, now, [] if woken is None else woken)

    def _wake_waiters(self, key: str, limit: int, now: datetime) -> list[str]:
        holders, waiters = self._slots_of(key, now)
        chosen = waiters[: admission.free_slots(limit, holders)]
        for waiter in chosen:
            self._wake(waiter.id, now)
            self._runs[waiter.id] = replace(self._runs[waiter.id], handoff_at=now)
        return [w.id for w in chosen]

    def _wake(self, run_id: str, now: datetime) -> bool:
        run = self._runs.get(run_id)
        if run is None or run.is_terminal:
            return False
        if _awaiting(run):
            self._runs[run_id] = replace(run, wake_requested_at=now)
            return False
        if run.status in _WAITING:
            self._runs[run_id] = replace(run, wake_at=now, updated_at=now)
        elif run.status in _LEASED:
            self._runs[run_id] = replace(run, wake_requested_at=now)
        return True

    # ---------------------------------------------------------------- step queues

    async def register_queues(self, settings: Sequence[QueueSettings], now: datetime) -> None:
        self._queues.register(settings)

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
        self._fenced(run_id, owner)
        if self._queues.queue(request.queue) is None:
            raise step_queues.unknown_queue(request.queue)
        self._apply(run_id, writes, now)
        woken = step_queues.release(self._queues, run_id, release, now) if release else []
        return step_queues.admitted(
            step_queues.admit(self._queues, run_id, request, now, retry), woken
        )

    async def release_steps(
        self, run_id: str, owner: str, writes: Writes, seqs: Sequence[int], now: datetime
    ) -> list[str]:
        self._fenced(run_id, owner)
        self._apply(run_id, writes, now)
        return step_queues.release(self._queues, run_id, seqs, now)

    # ---------------------------------------------------------------- from outside a turn

    async def pause_run(self, run_id: str, now: datetime) -> bool:
        run = self._existing(run_id)
        if not pausable(run):
            return False
        paused = self._runs[run_id] = paused_run(run, now)
        if leaves_line(run) and paused.status == RunStatus.PAUSED:
            assert run.singleton_key is not None
            self._wake_waiters(run.singleton_key, run.singleton_limit or 1, now)
        return True

    async def resume_run(self, run_id: str, now: datetime) -> bool:
        run = self._existing(run_id)
        if not resumable(run):
            return False
        self._runs[run_id] = resumed_run(run, now)
        return True

    def _existing(self, run_id: str) -> Run:
        run = self._runs.get(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        return run

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: object,
        now: datetime,
        *,
        kind: StepKind = StepKind.SIGNAL,
    ) -> bool:
        run = self._runs.get(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        if run.is_terminal:
            raise RunFinishedError(run_id, run.status)
        signal = Signal(next(self._ids), run_id, buffered_name(kind, name), payload, now)
        self._signals.setdefault(run_id, []).append(signal)
        if self._waits_for(run_id, kind, name):
            return self._wake(run_id, now)
        if run.status in _LEASED or _awaiting(run):
            self._wake(run_id, now)  # the turn in flight (here or on a worker) may have missed it
        return False

    def _waits_for(self, run_id: str, kind: StepKind, name: str) -> bool:
        return any(
            s.kind == kind and s.name == name and s.status == StepStatus.PENDING
            for s in self._steps.get(run_id, {}).values()
        )

    async def cancel_run(
        self, run_id: str, now: datetime, error: dict[str, object] | None
    ) -> CancelResult:
        run = self._runs.get(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        result = CancelResult()
        for target in [run, *self._descendants(run_id)]:
            if not target.is_terminal and self._cancel_one(
                self._runs[target.id], now, error, result.woken
            ):
                result.changed.append(target.id)
        return cancel_result(result)

    def _descendants(self, run_id: str) -> Iterable[Run]:
        """The descendants a cancellation reaches: a detached child (and its own) is left out."""
        children = [r for r in self._runs.values() if r.parent_id == run_id and not r.detached]
        for child in children:
            yield child
            yield from self._descendants(child.id)

    def _cancel_one(
        self,
        run: Run,
        now: datetime,
        error: dict[str, object] | None,
        woken: list[str] | None = None,
    ) -> bool:
        if run.is_terminal or run.status == RunStatus.CANCELLING:
            return False
        if run.status == RunStatus.RUNNING:
            self._runs[run.id] = cancelling_run(run, error, now)
        else:
            self._finish(run, Settlement(RunStatus.CANCELLED, None, error), now, woken)
        return True

    async def requeue_run(
        self,
        run_id: str,
        now: datetime,
        deadline_at: datetime | None,
        *,
        quota: QuotaGate | None = None,
        singleton: SingletonGate | None = None,
    ) -> Run:
        run = self._runs.get(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        if run.status not in (RunStatus.FAILED, RunStatus.DEAD, RunStatus.CANCELLED):
            raise not_requeueable(run_id, run.status)
        refusal = runbook.refusal(_Rows(self), requeue_spec(run, quota, singleton), now)
        if refusal is not None:
            raise refusal
        records = self._steps.setdefault(run_id, {})
        for seq in [s.seq for s in records.values() if s.status != StepStatus.COMPLETED]:
            del records[seq]
        requeued = requeued_run(run, now, deadline_at)
        self._runs[run_id] = requeued
        return requeued

    async def publish_event(
        self, name: str, payload: object, event_id: str | None, now: datetime
    ) -> tuple[Event, bool, list[str]]:
        if event_id is not None and event_id in self._event_ids:
            return self._event_ids[event_id], False, []
        event = Event(self._last_event_seq + 1, name, payload, now, event_id)
        self._last_event_seq = event.seq
        self._events.append(event)
        if event_id is not None:
            self._event_ids[event_id] = event
        woken = [
            run_id
            for run_id in list(self._steps)
            if self._waits_for(run_id, StepKind.EVENT, name) and self._wake(run_id, now)
        ]
        return event, True, woken

    async def events_after(self, name: str, after_seq: int, limit: int) -> list[Event]:
        return list(itertools.islice(self._named_after(name, after_seq), limit))

    def _named_after(self, name: str, after_seq: int) -> Iterator[Event]:
        start = bisect.bisect_right(self._events, after_seq, key=lambda e: e.seq)
        return (e for e in self._events[start:] if e.name == name)

    async def latest_event_seq(self) -> int:
        return self._last_event_seq

    # ---------------------------------------------------------------- schedules

    async def save_schedule(self, schedule: StoredSchedule) -> StoredSchedule:
        existing = self._schedules.get(schedule.id)
        if existing is not None:
            schedule = replace(
                schedule,
                created_at=existing.created_at,
                last_fire_at=existing.last_fire_at,
                last_run_id=existing.last_run_id,
                last_error=existing.last_error,
            )
        self._schedules[schedule.id] = schedule
        return schedule

    async def get_schedule(self, schedule_id: str) -> StoredSchedule | None:
        return self._schedules.get(schedule_id)

    async def list_schedules(self) -> list[StoredSchedule]:
        return [self._schedules[key] for key in sorted(self._schedules)]

    async def delete_schedule(self, schedule_id: str) -> bool:
        return self._schedules.pop(schedule_id, None) is not None

    async def due_schedules(
        self, now: datetime, limit: int, *, workflows: Collection[str] | None = None
    ) -> list[StoredSchedule]:
        due = [
            s
            for s in self._schedules.values()
            if not s.paused
            and s.next_fire_at is not None
            and s.next_fire_at <= now
            and (workflows is None or s.definition.get("workflow") in workflows)
        ]
        return sorted(due, key=lambda s: (s.next_fire_at, s.id))[:limit]

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
        fire = WindowFire(schedule_id, expected, next_window, next_fire, window=window)
        return self._fire(fire, specs, now)

    def _fire(
        self, fire: WindowFire, specs: Sequence[RunSpec], now: datetime
    ) -> list[Started] | None:
        schedule = self._schedules.get(fire.schedule_id)
        if schedule is None or schedule.paused or schedule.next_window_at != fire.expected:
            return None
        started = [self._create(spec, now) for spec in specs]
        fired = replace(
            schedule, next_window_at=fire.next_window, next_fire_at=fire.next_fire, last_fire_at=now
        )
        if specs:
            run_id, error = admission.last_fire(started, fire.window)
            fired = replace(fired, last_run_id=run_id, last_error=error)
        self._schedules[fire.schedule_id] = fired
        return started

    async def fire_windows(
        self, fires: Sequence[WindowFire], now: datetime
    ) -> list[list[Started] | None]:
        return [self._fire(fire, [] if fire.spec is None else [fire.spec], now) for fire in fires]

    # ---------------------------------------------------------------- retention

    async def prune_runs(self, cutoffs: Mapping[RunStatus, datetime], limit: int) -> list[str]:
        busy = {r.parent_id for r in self._runs.values() if r.parent_id and not r.is_terminal}
        due = [
            r
            for r in self._runs.values()
            if r.is_terminal
            and r.status in cutoffs
            and r.updated_at < cutoffs[r.status]
            and r.id not in busy
        ]
        doomed = [r.id for r in heapq.nsmallest(limit, due, key=lambda r: (r.updated_at, r.id))]
        for run_id in doomed:
            del self._runs[run_id]
            self._steps.pop(run_id, None)
            self._signals.pop(run_id, None)
            self._queues.drop_entries(run_id, None, lost_turn=False)
        return doomed

    async def prune_events(self, before: datetime, limit: int) -> int:
        # The newest event stays, and so does every event a pending wait may still read.
        floor = min(self._event_waits_after(), default=self._last_event_seq)
        doomed = [e for e in self._events[:-1] if e.created_at < before and e.seq <= floor]
        doomed = doomed[: max(limit, 0)]
        gone = {e.seq for e in doomed}
        self._events = [e for e in self._events if e.seq not in gone]
        for event in doomed:
            if event.id is not None:
                self._event_ids.pop(event.id, None)
        return len(doomed)

    def _event_waits_after(self) -> Iterable[int]:
        """The seq after which each pending event wait of an active run reads."""
        for run_id, steps in self._steps.items():
            if self._runs[run_id].is_terminal:
                continue
            for record in steps.values():
                waits = record.kind == StepKind.EVENT and record.status == StepStatus.PENDING
                after = record.input.get("after") if isinstance(record.input, dict) else None
                if waits and isinstance(after, int):
                    yield after

    # ---------------------------------------------------------------- reads

    async def get_run(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        return {i: self._runs[i] for i in run_ids if i in self._runs}

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
        query = RunQuery(workflow, status, tag, namespace=namespace, attributes=attributes)
        runs = [
            r
            for r in self._runs.values()
            if query.matches(r) and (parent_id is None or r.parent_id == parent_id)
        ]
        runs.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return runs[offset : offset + limit]

    async def page_runs(self, query: RunQuery, limit: int) -> list[Run]:
        found = [r for r in self._runs.values() if query.matches(r)]
        return heapq.nlargest(limit, found, key=lambda r: (r.created_at, r.id))

    async def run_activity(
        self, since: datetime, until: datetime, namespace: str | None = None
    ) -> list[ActivityCount]:
        counts: Counter[tuple[datetime, RunStatus | None, int | None]] = Counter()
        for run in self._of_namespace(namespace):
            if since <= run.created_at < until:
                counts[minute_of(run.created_at), None, None] += 1
            # A settled run is never written again: its updated_at is its settlement's.
            if run.is_terminal and since <= run.updated_at < until:
                took = (run.updated_at - run.created_at).total_seconds()
                counts[minute_of(run.updated_at), run.status, latency_bucket(took)] += 1
        return [ActivityCount(*where, runs) for where, runs in counts.items()]

    async def count_runs(self, query: RunQuery) -> dict[RunStatus, int]:
        everywhere = replace(query, after=None)
        return dict(Counter(r.status for r in self._runs.values() if everywhere.matches(r)))

    async def active_run_counts(
        self, namespace: str | None = None
    ) -> dict[tuple[str, RunStatus], int]:
        active = (r for r in self._of_namespace(namespace) if r.status in ACTIVE_STATUSES)
        return dict(Counter((r.workflow, r.status) for r in active))

    async def active_code_counts(self, namespace: str | None = None) -> dict[tuple[str, str], int]:
        active = (r for r in self._of_namespace(namespace) if r.status in ACTIVE_STATUSES)
        return dict(Counter((r.workflow, r.version) for r in active))

    def _of_namespace(self, namespace: str | None) -> Iterator[Run]:
        """The runs of ``namespace`` (None: every run)."""
        return (r for r in self._runs.values() if namespace is None or r.namespace == namespace)

    # ---------------------------------------------------------------- engines

    async def announce_engine(self, info: EngineInfo) -> None:
        self._engines[info.id] = info

    async def beat_engine(self, engine_id: str, at: datetime) -> bool:
        info = self._engines.get(engine_id)
        if info is not None:
            self._engines[engine_id] = replace(info, last_beat_at=at)
        return info is not None

    async def remove_engine(self, engine_id: str) -> None:
        self._engines.pop(engine_id, None)

    async def list_engines(self) -> list[EngineInfo]:
        return sorted(self._engines.values(), key=lambda e: (e.started_at, e.id))

    async def prune_engines(self, before: datetime) -> int:
        gone = [i for i, e in self._engines.items() if e.last_beat_at < before]
        for engine_id in gone:
            del self._engines[engine_id]
        return len(gone)

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        appended = replace(entry, id=len(self._audit) + 1)
        self._audit.append(appended)
        return appended

    async def list_audit(
        self, limit: int, *, before: int | None = None, namespace: str | None = None
    ) -> list[AuditEntry]:
        found = (
            e
            for e in reversed(self._audit)
            if (before is None or e.id < before) and (namespace is None or e.namespace == namespace)
        )
        return list(itertools.islice(found, limit))

    async def lane_runs(self, lane: str | None = None) -> list[Run]:
        gated = [
            r
            for r in self._runs.values()
            if r.status in ACTIVE_STATUSES
            and (r.singleton_key is not None or r.concurrency_key is not None)
            and (lane is None or lane in (r.singleton_key, r.concurrency_key))
        ]
        return sorted(gated, key=lambda r: (r.created_at, r.id))

    async def lane_members(
        self, shown: int, namespace: str | None = None, key: str | None = None
    ) -> list[LaneMember]:
        gated = await self.lane_runs()
        members = members_of((r for r in gated if namespace in (None, r.namespace)), shown)
        return of_lane_key(members, key)

    async def limited_runs(self, now: datetime) -> list[Run]:
        found = [
            r
            for r in self._runs.values()
            if (r.rate_until is not None and r.rate_until > now)
            or (r.debounce_key is not None and r.status == RunStatus.BLOCKED and r.held(now))
        ]
        return sorted(found, key=lambda r: (r.created_at, r.id))

    async def queue_views(self) -> list[QueueView]:
        return self._queues.views()

    async def get_reply(self, run_id: str, update_id: str) -> StepRecord | None:
        replies = (
            record
            for record in self._steps.get(run_id, {}).values()
            if record.kind == StepKind.REPLY
            and isinstance(record.input, dict)
            and record.input.get("update") == update_id
        )
        return min(replies, key=lambda r: r.seq, default=None)

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        return sorted(self._steps.get(run_id, {}).values(), key=lambda s: s.seq)

    async def list_signals(self, run_id: str) -> list[Signal]:
        return list(self._signals.get(run_id, []))


class _MemoryQueues:
    """The memory store's queue tables (a ``step_queues.QueueBook``)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._rows: dict[str, QueueRow] = {}
        self._entries: dict[tuple[str, int], QueueEntry] = {}
        self._served: dict[tuple[str, str], int] = {}  # (queue, fairness key) -> last served
        self._arrivals = itertools.count(1)

    def register(self, settings: Sequence[QueueSettings]) -> None:
        for given in settings:
            row = self._rows.get(given.name) or QueueRow(given)
            self._rows[given.name] = replace(row, settings=given)

    def queue(self, name: str) -> QueueRow | None:
        return self._rows.get(name)

    def entry(self, run_id: str, seq: int) -> QueueEntry | None:
        return self._entries.get((run_id, seq))

    def add_entry(self, run_id: str, request: QueueRequest, now: datetime) -> QueueEntry:
        entry = QueueEntry(
            next(self._arrivals),
            request.queue,
            run_id,
            request.seq,
            request.priority,
            request.fairness_key,
        )
        self._entries[run_id, request.seq] = entry
        return entry

    def _live(self, queue: str) -> list[QueueEntry]:
        runs = self._store._runs
        return [
            e for e in self._entries.values() if e.queue == queue and not runs[e.run_id].is_terminal
        ]

    def views(self) -> list[QueueView]:
        runs = self._store._runs
        live = [e for e in self._entries.values() if not runs[e.run_id].is_terminal]
        return views_of(list(self._rows.values()), sorted(live, key=lambda e: e.id), self._served)

    def holders(self, queue: str) -> int:
        return sum(1 for e in self._live(queue) if e.admitted_at is not None)

    def first_waiting(self, row: QueueRow, count: int) -> list[QueueEntry]:
        name = row.settings.name
        runs = self._store._runs
        waiting = [
            e
            for e in self._live(name)
            if e.admitted_at is None and runs[e.run_id].status != RunStatus.PAUSED
        ]
        waiting.sort(
            key=lambda e: order_key(row.settings, e, self._served.get((name, e.fairness_key)))
        )
        return waiting[:count]

    def save_admitted(self, entry: QueueEntry, row: QueueRow, now: datetime) -> None:
        self._entries[entry.run_id, entry.seq] = replace(entry, admitted_at=now)
        self._rows[row.settings.name] = row
        self._served[row.settings.name, entry.fairness_key] = row.served

    def save_denied(self, entry: QueueEntry) -> None:
        self._entries[entry.run_id, entry.seq] = replace(entry, denials=entry.denials + 1)

    def mark_queued(self, run_id: str) -> None:
        run = self._store._runs[run_id]
        if not run.queued:
            self._store._runs[run_id] = replace(run, queued=True)

    def _in_flight(self, entry: QueueEntry) -> bool:
        """Whether the entry's step is a remote attempt sent and not answered yet."""
        record = self._store._steps.get(entry.run_id, {}).get(entry.seq)
        return record is not None and record.status == StepStatus.RUNNING

    def drop_entries(
        self, run_id: str, seqs: Collection[int] | None, *, lost_turn: bool
    ) -> set[str]:
        touched: set[str] = set()
        for key, entry in list(self._entries.items()):
            if entry.run_id != run_id or (seqs is not None and entry.seq not in seqs):
                continue
            if lost_turn and (entry.admitted_at is None or self._in_flight(entry)):
                continue
            del self._entries[key]
            touched.add(entry.queue)
        return touched

    def wake(self, run_ids: Sequence[str], now: datetime) -> list[str]:
        return [run_id for run_id in run_ids if self._store._wake(run_id, now)]


def report_verdict(
    run: Run | None, record: StepRecord | None, attempt: int, fence: int | None
) -> str:
    """How a worker's report on ``attempt`` of ``record``, sent under ``fence``, lands
    (``Store.record_step_result``)."""
    if run is None or run.is_terminal or record is None or record.attempts != attempt:
        return "dropped"
    if older_fence(fence, record):
        return "dropped"
    return "recorded" if record.status == StepStatus.RUNNING else "duplicate"


def reported_step(
    record: StepRecord, ok: bool, output: object, error: dict[str, object] | None, now: datetime
) -> StepRecord:
    """The record once a worker reported its attempt: completed, or pending for the next turn."""
    return replace(
        record,
        status=StepStatus.COMPLETED if ok else StepStatus.PENDING,
        output=output if ok else None,
        error=None if ok else dict(error or {}),
        wake_at=None,
        finished_at=now,
    )


def _foldable(run: Run, now: datetime) -> bool:
    """Whether a debounced run has not begun yet, so a start of its key folds into it."""
    return run.status == RunStatus.BLOCKED and run.held(now)


def _awaiting(run: Run) -> bool:
    return run.status == RunStatus.SUSPENDED and run.awaiting_decision_task_id is not None


def _claimable(run: Run, now: datetime, handoff: bool = False) -> bool:
    if run.status == RunStatus.PENDING:
        return True
    if run.status in _WAITING:
        # A handed-off timer claims whatever the wake time (the hand-off pushed it a lease
        # ahead), but never before a held run's begin_at (a stale or replayed copy).
        return (handoff and not run.held(now)) or (run.wake_at is not None and run.wake_at <= now)
    if run.status in _LEASED:
        return run.lease_expires_at is not None and run.lease_expires_at <= now
    return False


def _rearmable(run: Run, now: datetime) -> bool:
    """A held run a hand-off came too early for (by this clock): the hand-off pushed its wake
    time a lease ahead, so it is made due at its ``begin_at`` again, not a lease late."""
    return (
        run.status in _WAITING
        and run.held(now)
        and run.wake_at is not None
        and run.begin_at is not None
        and run.wake_at > run.begin_at
    )


class _Rows:
    """The memory store's run records, for ``runbook``'s claim and settlement."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def get(self, run_id: str) -> Run:
        return self._store._runs[run_id]

    def find(self, run_id: str) -> Run | None:
        return self._store._runs.get(run_id)

    def insert(self, run: Run) -> None:
        self._store._runs[run.id] = run
        self._store._steps[run.id] = {}

    def insert_new(self, run: Run) -> bool:
        if run.id in self._store._runs:
            return False
        self.insert(run)
        return True

    def insert_steps(self, records: Sequence[StepRecord]) -> None:
        for record in records:
            self._store._steps[record.run_id][record.seq] = record

    def held_of(self, debounce_key: str, now: datetime) -> Run | None:
        runs = self._store._runs.values()
        held = [r for r in runs if r.debounce_key == debounce_key and _foldable(r, now)]
        return max(held, key=lambda r: (r.begin_at, r.id), default=None)

    def rate_last(self, rate_key: str, limit: int) -> datetime | None:
        runs = self._store._runs.values()
        counted = [r.rate_at for r in runs if r.rate_key == rate_key and r.rate_at]
        return heapq.nlargest(limit, counted)[-1] if len(counted) >= limit else None

    def quota_count(self, key: str, statuses: Collection[RunStatus]) -> int:
        runs = self._store._runs.values()
        return sum(1 for r in runs if r.concurrency_key == key and r.status in statuses)

    def active_ids_of_key(self, key: str) -> list[str]:
        return [r.id for r in self._store._active_of_key(key)]

    def cancel(self, run: Run, now: datetime) -> None:
        self._store._cancel_one(run, now, None)

    def save(self, run: Run, before: Run | None = None) -> None:
        self._store._runs[run.id] = run

    def create(self, spec: RunSpec, now: datetime, *, gated: bool) -> Started:
        return self._store._create(spec, now, gated=gated)

    def drop_signals(self, run_id: str) -> None:
        self._store._signals.pop(run_id, None)

    def wake_waiters(self, key: str, limit: int, now: datetime) -> list[str]:
        return self._store._wake_waiters(key, limit, now)

    def wake(self, run_id: str, now: datetime) -> bool:
        return self._store._wake(run_id, now)

    def lease(self, run: Run, lease: Lease, now: datetime) -> Claim:
        return self._store._lease(run, lease, now)

    def holders(self, key: str) -> int:
        return sum(1 for r in self._store._active_of_key(key) if r.holds_slot)

    def admits(self, run: Run, now: datetime) -> bool:
        return self._store._admit(run, now)

    def release_queue(self, run_id: str, now: datetime, *, lost_turn: bool) -> list[str]:
        return step_queues.release(self._store._queues, run_id, None, now, lost_turn=lost_turn)


_NOT_WAITING = (RunStatus.CANCELLING, RunStatus.PAUSED)


__all__ = [
    "ACTIVE_STATUSES",
    "MemoryStore",
    "report_verdict",
    "reported_step",
]
