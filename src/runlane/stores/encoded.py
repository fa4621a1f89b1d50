"""A store seen through a codec: payloads encoded on every write, decoded on every read.

An engine with a codec (``Engine(codec=...)``) wraps its store in :class:`EncodedStore`, so
nothing above it (turns, the API, views) handles an encoded payload and nothing below it (the
stores) handles a clear one. The stores are untouched: an encoded payload is a JSON value like
any other to them (see :mod:`runlane.payloads`), and everything they decide by stays in clear.

Reads of runs, records, signals and events are strict (a payload that does not decode raises
``PayloadCodecError``) unless the store is the lenient one of a view. What a write answers
(the runs a start created or found) is always decoded leniently: those runs are for their ids
and statuses. A claim that does not decode is never an exception: it comes back marked
``unreadable`` (``Claim.unreadable``), and its claimer settles the run failed, so a run
written under another key is failed once rather than claimed again and again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..attributes import AttributeValue
from ..models import (
    Admission,
    CancelResult,
    Claim,
    ClaimOutcome,
    Event,
    LaneMember,
    Lease,
    RetryTimer,
    Run,
    RunQuery,
    RunSpec,
    Serves,
    Settlement,
    SettleResult,
    Signal,
    Started,
    StepKind,
    StepRecord,
    StoredSchedule,
    WindowFire,
    Writes,
)
from ..payloads import Payloads
from ..step_queues import QueueRequest
from .base import Store

PASSED = frozenset(
    {
        # No payload goes in or comes out: handed to the store as they are.
        "atomic_admission",
        "open",
        "close",
        "count_runs",
        "active_run_counts",
        "active_code_counts",
        "list_engines",
        "run_activity",
        "queue_views",
        "pending_run_ids",
        "due_run_ids",
        "expired_run_ids",
        "timed_out_run_ids",
        "park_full_waiters",
        "renew_leases",
        "record_heartbeat",
        "await_decision",
        "extend_decision",
        "register_queues",
        "pause_run",
        "resume_run",
        "latest_event_seq",
        "delete_schedule",
        "prune_runs",
        "prune_events",
        "announce_engine",
        "beat_engine",
        "remove_engine",
        "prune_engines",
        "append_audit",
        "list_audit",
    }
)
"""The store's methods that carry no payload. Every other method of the ``Store`` protocol is
one of this class's own; a method the protocol gains must be put in one place or the other
(``tests/unit/test_payloads.py`` fails until it is), so a new payload never goes out in clear."""


class EncodedStore:
    """``inner`` with every payload encoded on the way in and decoded on the way out."""

    def __init__(self, inner: Store, payloads: Payloads) -> None:
        self.inner = inner
        self.payloads = payloads
        # What a write answers is read leniently (see the module's docstring).
        self._echo = payloads.lenient()

    def __getattr__(self, name: str) -> Any:
        # Only reached for what this class does not define: the store's own attributes (its
        # path, its pool) and the methods that carry no payload.
        if name in PASSED or not hasattr(Store, name):
            return getattr(self.inner, name)
        raise AttributeError(f"EncodedStore does not say whether Store.{name} carries payloads")

    def lenient(self) -> EncodedStore:
        """The same store for a view: a payload that does not decode is left as stored."""
        return EncodedStore(self.inner, self.payloads.lenient())

    # ---------------------------------------------------------------- reads

    async def get_run(self, run_id: str) -> Run | None:
        run = await self.inner.get_run(run_id)
        return None if run is None else self.payloads.open_run(run)

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        runs = await self.inner.get_runs(run_ids)
        return {run_id: self.payloads.open_run(run) for run_id, run in runs.items()}

    async def list_runs(self, **filters: Any) -> list[Run]:
        return self.payloads.open_runs(await self.inner.list_runs(**filters))

    async def page_runs(self, query: RunQuery, limit: int) -> list[Run]:
        return self.payloads.open_runs(await self.inner.page_runs(query, limit))

    async def lane_runs(self, lane: str | None = None) -> list[Run]:
        return self.payloads.open_runs(await self.inner.lane_runs(lane))

    async def lane_members(
        self, shown: int, namespace: str | None = None, key: str | None = None
    ) -> list[LaneMember]:
        return await self.inner.lane_members(shown, namespace, key)  # no payload in them

    async def limited_runs(self, now: datetime) -> list[Run]:
        return self.payloads.open_runs(await self.inner.limited_runs(now))

    async def get_step(self, run_id: str, seq: int) -> StepRecord | None:
        record = await self.inner.get_step(run_id, seq)
        return None if record is None else self.payloads.open_record(record)

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        return self.payloads.open_records(await self.inner.list_steps(run_id))

    async def list_signals(self, run_id: str) -> list[Signal]:
        return [self.payloads.open_signal(s) for s in await self.inner.list_signals(run_id)]

    async def get_reply(self, run_id: str, update_id: str) -> StepRecord | None:
        record = await self.inner.get_reply(run_id, update_id)
        return None if record is None else self.payloads.open_record(record)

    async def events_after(self, name: str, after_seq: int, limit: int) -> list[Event]:
        events = await self.inner.events_after(name, after_seq, limit)
        return [self.payloads.open_event(event) for event in events]

    # ---------------------------------------------------------------- starts and claims

    async def create_runs(
        self,
        specs: Sequence[RunSpec],
        now: datetime,
        *,
        lease: Lease | None = None,
        claims: int = 1,
    ) -> list[Started]:
        sealed = self.payloads.seal_specs(specs)
        started = await self.inner.create_runs(sealed, now, lease=lease, claims=claims)
        return self._started(started)

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
        outcome = await self.inner.claim_run(
            run_id,
            owner,
            now,
            lease_until,
            singleton_retry=singleton_retry,
            max_recoveries=max_recoveries,
            handoff=handoff,
            dead_letters=dead_letters,
            serves=serves,
        )
        return replace(
            outcome, claim=self._claim(outcome.claim), settled=self._echoed(outcome.settled)
        )

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
        claim = await self.inner.claim_decision(
            run_id, task_id, owner, now, lease_until, serves=serves
        )
        return self._claim(claim)

    async def hand_off_due_runs(
        self,
        now: datetime,
        limit: int,
        namespace: str | None,
        hold_until: datetime,
        *,
        serves: Serves | None = None,
    ) -> list[Run]:
        runs = await self.inner.hand_off_due_runs(now, limit, namespace, hold_until, serves=serves)
        return self._echo.open_runs(runs)

    async def requeue_run(self, run_id: str, now: datetime, *args: Any, **gates: Any) -> Run:
        run = await self.inner.requeue_run(run_id, now, *args, **gates)
        return self._echo.open_run(run)

    # ---------------------------------------------------------------- turn writes

    async def checkpoint(
        self, run_id: str, owner: str, writes: Writes, now: datetime
    ) -> list[Started]:
        sealed = self.payloads.seal_writes(writes)
        return self._started(await self.inner.checkpoint(run_id, owner, sealed, now))

    async def set_attributes(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        attributes: Mapping[str, AttributeValue],
        now: datetime,
    ) -> None:
        # The attributes stay in clear: listings filter on them.
        sealed = self.payloads.seal_writes(writes)
        await self.inner.set_attributes(run_id, owner, sealed, attributes, now)

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
        sealed = self.payloads.seal_writes(writes)
        return await self.inner.suspend_run(run_id, owner, sealed, wake_at, now, blocked=blocked)

    async def settle_run(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        settlement: Settlement,
        now: datetime,
        **options: Any,
    ) -> SettleResult:
        result = await self.inner.settle_run(
            run_id,
            owner,
            self.payloads.seal_writes(writes),
            self.payloads.seal_settlement(settlement),
            now,
            **options,
        )
        handler = None if result.handler is None else self._started([result.handler])[0]
        return replace(result, successor=self._claim(result.successor), handler=handler)

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
        sealed = self.payloads.seal_writes(writes)
        return await self.inner.admit_step(
            run_id, owner, sealed, request, now, retry, release=release
        )

    async def release_steps(
        self, run_id: str, owner: str, writes: Writes, seqs: Sequence[int], now: datetime
    ) -> list[str]:
        sealed = self.payloads.seal_writes(writes)
        return await self.inner.release_steps(run_id, owner, sealed, seqs, now)

    # ---------------------------------------------------------------- from outside a turn

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
        payloads = self.payloads
        return await self.inner.record_step_result(
            run_id,
            seq,
            attempt,
            ok,
            payloads.seal(output),
            payloads.seal_error(error),
            now,
            fence=fence,
        )

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: object,
        now: datetime,
        *,
        kind: StepKind = StepKind.SIGNAL,
    ) -> bool:
        sealed = self.payloads.seal(payload)
        return await self.inner.deliver_signal(run_id, name, sealed, now, kind=kind)

    async def cancel_run(
        self, run_id: str, now: datetime, error: dict[str, object] | None
    ) -> CancelResult:
        return await self.inner.cancel_run(run_id, now, self.payloads.seal_error(error))

    async def publish_event(
        self, name: str, payload: object, event_id: str | None, now: datetime
    ) -> tuple[Event, bool, list[str]]:
        sealed = self.payloads.seal(payload)
        event, created, woken = await self.inner.publish_event(name, sealed, event_id, now)
        return self._echo.open_event(event), created, woken

    # ---------------------------------------------------------------- schedules

    async def save_schedule(self, schedule: StoredSchedule) -> StoredSchedule:
        saved = await self.inner.save_schedule(self.payloads.seal_schedule(schedule))
        return self.payloads.open_schedule(saved)

    async def get_schedule(self, schedule_id: str) -> StoredSchedule | None:
        schedule = await self.inner.get_schedule(schedule_id)
        return None if schedule is None else self.payloads.open_schedule(schedule)

    async def list_schedules(self) -> list[StoredSchedule]:
        return [self.payloads.open_schedule(s) for s in await self.inner.list_schedules()]

    async def due_schedules(
        self, now: datetime, limit: int, *, workflows: Collection[str] | None = None
    ) -> list[StoredSchedule]:
        due = await self.inner.due_schedules(now, limit, workflows=workflows)
        return [self.payloads.open_schedule(s) for s in due]

    async def fire_schedule(
        self, schedule_id: str, *, specs: Sequence[RunSpec], **window: Any
    ) -> list[Started] | None:
        sealed = self.payloads.seal_specs(specs)
        started = await self.inner.fire_schedule(schedule_id, specs=sealed, **window)
        return None if started is None else self._started(started)

    async def fire_windows(
        self, fires: Sequence[WindowFire], now: datetime
    ) -> list[list[Started] | None]:
        sealed = [
            fire if fire.spec is None else replace(fire, spec=self.payloads.seal_spec(fire.spec))
            for fire in fires
        ]
        results = await self.inner.fire_windows(sealed, now)
        return [None if started is None else self._started(started) for started in results]

    # ---------------------------------------------------------------- echoes

    def _claim(self, claim: Claim | None) -> Claim | None:
        return None if claim is None else self.payloads.open_claim(claim)

    def _echoed(self, run: Run | None) -> Run | None:
        return None if run is None else self._echo.open_run(run)

    def _started(self, started: Sequence[Started]) -> list[Started]:
        return [
            replace(one, run=self._echoed(one.run), claim=self._claim(one.claim)) for one in started
        ]


def unwrapped(store: Any) -> Any:
    """The store under a codec's view of it, or ``store`` itself."""
    return store.inner if isinstance(store, EncodedStore) else store


__all__ = ["PASSED", "EncodedStore", "unwrapped"]
