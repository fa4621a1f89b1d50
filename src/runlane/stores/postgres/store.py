"""PostgresStore: the store contract on PostgreSQL, for fleets of engines sharing one database.

Every method is one atomic unit on one pooled connection: a single statement in autocommit, or
one transaction (pipelined where no statement waits on another's result). Admission is atomic
per key: a start or claim takes the key's transaction-scoped advisory lock in a statement before
the one that counts, so different keys never wait on each other and concurrent starts from any
number of processes never overshoot a quota. Claims lock their row with ``SKIP LOCKED``: a row
another instance is claiming is simply "not claimable now". The statements live in
``sql/queries.sql``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from ... import admission, step_queues
from ...activity import ActivityCount
from ...attributes import AttributeValue
from ...errors import (
    LeaseLostError,
    RunFinishedError,
    RunNotFoundError,
    RunPausing,
    not_requeueable,
)
from ...faults import unavailable
from ...lanes import of_lane_key
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
    StepStatus,
    StoredSchedule,
    WindowFire,
    Writes,
    buffered_name,
    cancel_result,
    dead_settlement,
    ready_ids,
    run_from_spec,
    with_handler_error,
)
from ...serialization import dumps
from ...step_queues import QueueRequest, QueueView
from ...urls import redact
from ..base import check_lease, offered, window_results
from .db import (
    SQL,
    Call,
    Conn,
    Contended,
    Database,
    execute,
    fetch_all,
    fetch_one,
    pipeline,
)
from .rows import (
    Row,
    attribute_params,
    audit_from_row,
    audit_params,
    claimable,
    depth_first,
    engine_from_row,
    engine_params,
    event_from_row,
    fenced_params,
    filtered,
    fires_param,
    gate_keys,
    gate_params,
    gate_refusal,
    gated,
    history_params,
    json_param,
    lane_member_from_plain,
    pg_array,
    query_params,
    retry_params,
    run_from_row,
    schedule_from_row,
    served_params,
    settle_params,
    signal_from_row,
    specs_params,
    start_refusal,
    started_by_id,
    step_from_row,
    timers_param,
)
from .schema import upgrade
from .starts import batch_calls, batch_outcomes, gated_outcome, start_statement
from .writes import KeyedSettlements, PlainWrites, fence_error, woken_by

_LEASED = (RunStatus.RUNNING, RunStatus.CANCELLING)
_TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.DEAD)
_REQUEUEABLE = (RunStatus.FAILED, RunStatus.DEAD, RunStatus.CANCELLED)
_GROUP_MOST = 100  # checkpoints and settlements of different runs written together, at most
_RACES = 5  # a start that lost a race (its id, its held run) to a concurrent one: tries, at most


class PostgresStore:
    """A store on PostgreSQL (psycopg 3, async, pooled). Share one object between engines freely."""

    atomic_admission = True

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.url = url
        self._db = Database(url, min_size, max_size)
        self._writes = PlainWrites(self._db, _GROUP_MOST)
        self._keyed = KeyedSettlements(self._db, _GROUP_MOST)

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        return cls(url)

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url)!r})"

    async def open(self) -> None:
        """Migrate (once per database, under an advisory lock) and open the pool; counted."""
        await self._db.open()

    async def close(self) -> None:
        """Close the pool once every ``open`` has been matched; extra calls do nothing."""
        await self._db.close()

    async def reset_for_tests(self) -> None:
        """Empty every runlane table (tests share one database for a whole session)."""
        await self._db.rows("reset")

    async def _lock_keys(self, conn: Conn, keys: Sequence[str]) -> None:
        """Take the admission locks of ``keys``, in order."""
        if keys:
            await execute(conn, "lock_keys", keys=pg_array(keys), run_id=None)

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
        if not specs:
            return []
        if any(s.history for s in specs):
            # A fork's run and its copied records: one transaction.
            return await self._db.tx(lambda conn: self._create_all(conn, specs, now))
        if len({s.id for s in specs}) == len(specs) and not any(gated(s) for s in specs):
            # One statement, atomic by itself: no transaction, one round trip.
            params = specs_params(specs, offered(specs, lease, claims))
            found = started_by_id(await self._db.rows("insert_runs", **params))
            missing = [s.id for s in specs if s.id not in found]
            found.update((run.id, Started(run, created=False)) for run in await self._runs(missing))
            return [found[spec.id] for spec in specs]
        if any(_replaces(s) for s in specs):
            return await self._db.tx(lambda conn: self._create_all(conn, specs, now))
        if len(specs) == 1:
            return [await self._create_gated(specs[0], now, lease if claims else None)]
        return await self._create_batch(specs, now, offered(specs, lease, claims))

    async def _create_batch(
        self, specs: Sequence[RunSpec], now: datetime, leases: Sequence[Lease | None]
    ) -> list[Started]:
        """Many starts, gated ones among them, in one round trip (see ``starts``); a start
        whose id a concurrent one took meanwhile is read, or made again alone (unclaimed)."""
        results = await self._db.batch(*batch_calls(specs, now, leases))
        outcomes = batch_outcomes(specs, results, now)
        lost = [s.id for s, o in zip(specs, outcomes, strict=True) if o is None]
        found = {run.id: Started(run, created=False) for run in await self._runs(lost)}
        return [
            outcome or found.get(spec.id) or (await self.create_runs([spec], now))[0]
            for spec, outcome in zip(specs, outcomes, strict=True)
        ]

    async def _create_gated(
        self, spec: RunSpec, now: datetime, lease: Lease | None = None
    ) -> Started:
        """One gated or limited start: the key locks, the counts and the insert (or the fold
        into a held debounced run) in one statement."""
        name, params = start_statement(spec, now, lease)
        for _ in range(_RACES):
            started = gated_outcome(spec, _first(await self._db.rows(name, **params)), now)
            if started is None:  # a start of the id (or into the held run) committed meanwhile
                run = await self.get_run(spec.id)
                started = Started(run, created=False) if run is not None else None
            if started is not None:
                return started
        raise unavailable(Contended(spec.id))

    async def _create_all(
        self, conn: Conn, specs: Sequence[RunSpec], now: datetime, *, locked: bool = False
    ) -> list[Started]:
        await self._lock_keys(conn, [] if locked else gate_keys(specs))
        if len({s.id for s in specs}) < len(specs):
            # A repeated id makes the batch order-sensitive: one spec at a time, in order.
            started = [await self._create_one(conn, spec, now) for spec in specs]
        else:
            plain = await self._insert_plain(conn, [s for s in specs if not gated(s)])
            started = [
                plain[spec.id] if not gated(spec) else await self._create_one(conn, spec, now)
                for spec in specs
            ]
        for spec, outcome in zip(specs, started, strict=True):
            if spec.history and outcome.created:
                await execute(conn, "insert_history", **history_params(spec))
        return started

    async def _insert_plain(self, conn: Conn, specs: Sequence[RunSpec]) -> dict[str, Started]:
        """Ungated specs (no key counts them) in one statement."""
        if not specs:
            return {}
        found = started_by_id(await fetch_all(conn, "insert_runs", **specs_params(specs)))
        missing = [s.id for s in specs if s.id not in found]
        for run in await self._fetch_runs(conn, missing):
            found[run.id] = Started(run, created=False)
        return found

    async def _create_one(self, conn: Conn, spec: RunSpec, now: datetime) -> Started:
        """Check, gate and insert one spec (its keys locked) inside the caller's transaction."""
        name, params = start_statement(spec, now)
        if not _replaces(spec):
            return await self._insert_gated(conn, spec, now, name, params)
        counting = "limit_counts" if spec.limited else "gate_counts"
        existing, counts = await pipeline(conn, ("get_run", {"id": spec.id}), (counting, params))
        if existing:
            return Started(run_from_row(existing[0]), created=False)
        refusal = start_refusal(spec, counts[0], now)
        if refusal is not None:
            return Started(None, created=False, rejected=refusal)
        if not (spec.limited and counts[0]["debounced"]):  # a start that folds replaces nothing
            # A replaced run's step queue entries count for nothing once it settled; they go
            # when its run is pruned (a run that holds a queue's slot is rarely replaced).
            for other in await fetch_all(conn, "active_of_key", key=params["singleton_key"]):
                # Every waiter of the key goes too: what the cancellations wake, the new run takes.
                await self._cancel_one(conn, other["id"], other["status"], now, None, [], [])
        if spec.limited:
            return await self._insert_gated(conn, spec, now, name, params)
        inserted = await self._insert_plain(conn, [spec])
        if not inserted[spec.id].created:
            raise Contended(spec.id)
        return inserted[spec.id]

    async def _insert_gated(
        self, conn: Conn, spec: RunSpec, now: datetime, name: str, params: Row
    ) -> Started:
        started = gated_outcome(spec, await fetch_one(conn, name, **params), now)
        if started is None:
            raise Contended(spec.id)
        return started

    async def _fetch_runs(self, conn: Conn, run_ids: Sequence[str]) -> list[Run]:
        if not run_ids:
            return []
        return [
            run_from_row(row) for row in await fetch_all(conn, "get_runs", ids=pg_array(run_ids))
        ]

    # ---------------------------------------------------------------- claims

    async def pending_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        return await self._ids("pending_run_ids", now, limit, namespace, serves)

    async def due_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        return await self._ids("due_run_ids", now, limit, namespace, serves)

    async def expired_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        return await self._ids("expired_run_ids", now, limit, namespace, serves)

    async def timed_out_run_ids(
        self, now: datetime, limit: int, namespace: str | None, *, serves: Serves | None = None
    ) -> list[str]:
        return await self._ids("timed_out_run_ids", now, limit, namespace, serves)

    async def _ids(
        self, name: str, now: datetime, limit: int, namespace: str | None, serves: Serves | None
    ) -> list[str]:
        """Claim queue ``name``: of every code, or (``name_served``) of the codes served."""
        params = {"now": now, "limit": limit, "namespace": namespace}
        if serves is not None:
            name, params = f"{name}_served", {**params, **served_params(serves)}
        rows = await self._db.rows(name, **params)
        return [row["id"] for row in rows]

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
        lease = {"id": run_id, "owner": owner, "now": now, "lease_until": lease_until}
        # One round trip for every claim but a recovery: the run's key lock (none without a
        # singleton key), then the plain claim (no admission needed) or the admission claim (a
        # waiter: admitted or parked), whichever applies; and the claimed run's history.
        served = served_params(serves)
        plain = ("claim_plain", {**lease, "handoff": handoff, **served})
        retry = retry_params(singleton_retry)
        admit = ("claim_admit", {**lease, "handoff": handoff, **retry, **served})
        _, found, admitted, _, steps, signals = await self._db.batch(
            _lock_call((), run_id),
            plain,
            admit,
            ("quiet_commit_if_parked", {"id": run_id, "now": now}),
            ("steps_of", {"id": run_id}),
            ("signals_of", {"id": run_id}),
        )
        row, waiter = _first(found), _first(admitted)
        if row is not None and row["id"] is not None:
            return _claimed(row, steps, signals)
        if waiter is not None and waiter["id"] is not None:
            return replace(_claimed(waiter, steps, signals), handed_off_at=waiter["released_at"])
        if waiter is not None and waiter["parked"]:
            return ClaimOutcome(parked=True)
        if row is None:
            return ClaimOutcome()
        peek = _peeked(row)
        if serves is not None and (peek["workflow"], peek["version"]) not in serves:
            return ClaimOutcome(unserved=claimable(peek, now, handoff))
        pausing = peek["pause_requested_at"] is not None and claimable(peek, now, handoff)
        if not pausing and not _recoverable(peek, now) and not (handoff and _held(peek)):
            return ClaimOutcome()

        async def work(conn: Conn) -> ClaimOutcome:
            row = await self._lock_claimable(conn, run_id, now, handoff)
            if row is None:
                if handoff:
                    await execute(conn, "rearm_held", id=run_id, now=now)
                return ClaimOutcome()
            if row["pause_requested_at"] is not None and row["status"] != RunStatus.CANCELLING:
                # Asked to pause while a turn held it, which ended before its next write.
                await execute(conn, "park_paused", id=run_id, now=now)
                return ClaimOutcome()
            if row["status"] in _LEASED:
                recovered = await self._recover(conn, row, lease, max_recoveries, dead_letters)
                if recovered is not None:
                    return recovered
                if row["queued"]:  # the slots its lost turn held go (its replay asks again)
                    call = _release_call(run_id, None, None, now, lost_turn=True)
                    await pipeline(conn, call)
            admit = row["singleton_key"] is not None and not row["holds_slot"]
            if admit and not await self._admits(conn, row, now):
                await execute(conn, "park", id=run_id, now=now, **retry)
                return ClaimOutcome(parked=True)
            return await self._lease(conn, {**lease, "admit": admit})

        outcome = await self._db.tx(work)
        if outcome.settled is not None and outcome.settled.queued:
            await self._release_settled(run_id, now)
        return outcome

    async def _lock_claimable(
        self, conn: Conn, run_id: str, now: datetime, handoff: bool
    ) -> Row | None:
        """The run's row, locked, if it is claimable now (its key lock taken first)."""
        *_, rows = await pipeline(
            conn,
            _lock_call((), run_id),
            # A recovery releases the slots the run holds: their queues are locked first.
            _queue_locks(run_id, None),
            # A handed-off timer waits for the row (see ``_held``); other claimers skip it.
            ("lock_run_wait" if handoff else "lock_run", {"id": run_id}),
        )
        return rows[0] if rows and claimable(rows[0], now, handoff) else None

    async def _recover(
        self,
        conn: Conn,
        row: Row,
        lease: Row,
        max_recoveries: int | None,
        dead_letters: Collection[str],
    ) -> ClaimOutcome | None:
        """Count a recovery of an expired lease. The outcome when the run must not run again
        (settled cancelled or dead, or leased to ``lease`` dying), else None."""
        now = lease["now"]
        bumped = await fetch_one(conn, "add_recovery", id=row["id"])
        recoveries = bumped["recoveries"] if bumped is not None else 0
        if row["status"] == RunStatus.CANCELLING:
            cancelled = Settlement(RunStatus.CANCELLED, None, row["error"])
            return ClaimOutcome(settled=await self._finish(conn, row["id"], cancelled, now))
        dead = dead_settlement(recoveries, max_recoveries)
        if dead is None:
            return None
        if row["workflow"] in dead_letters:
            return replace(await self._lease(conn, {**lease, "admit": False}), dying=True)
        return ClaimOutcome(settled=await self._finish(conn, row["id"], dead, now))

    async def _admits(self, conn: Conn, row: Row, now: datetime) -> bool:
        counts = await fetch_one(
            conn,
            "admission_counts",
            key=row["singleton_key"],
            created_at=row["created_at"],
            id=row["id"],
            most=row["singleton_limit"] or 1,
            now=now,
        )
        assert counts is not None
        return admission.admits(row["singleton_limit"] or 1, counts["holders"], counts["ahead"])

    async def _lease(self, conn: Conn, lease: Row) -> ClaimOutcome:
        run_id = lease["id"]
        runs, steps, signals = await pipeline(
            conn, ("claim", lease), ("steps_of", {"id": run_id}), ("signals_of", {"id": run_id})
        )
        return _claimed(runs[0], steps, signals)

    async def hand_off_due_runs(
        self,
        now: datetime,
        limit: int,
        namespace: str | None,
        hold_until: datetime,
        *,
        serves: Serves | None = None,
    ) -> list[Run]:
        params = {"now": now, "limit": limit, "namespace": namespace, "hold_until": hold_until}
        name = "hand_off_due" if serves is None else "hand_off_due_served"
        rows = await self._db.rows(name, **params, **served_params(serves))
        rows.sort(key=lambda row: (row["was_due"], row["id"]))
        return [run_from_row(row) for row in rows]

    async def park_full_waiters(self, timers: Mapping[str, RetryTimer], now: datetime) -> list[str]:
        if not timers:
            return []
        _, parked, _ = await self._db.batch(
            ("lock_waiter_keys", {"ids": pg_array(timers)}),
            ("park_full_waiters", {"timers": timers_param(timers), "now": now}),
            # Lost in a server crash, a waiter is only due again a little earlier.
            ("quiet_commit", {}),
        )
        return [row["id"] for row in parked]

    async def renew_leases(self, leases: Mapping[str, str], lease_until: datetime) -> set[str]:
        if not leases:
            return set()
        params = {
            "ids": pg_array(leases),
            "owners": pg_array(leases.values()),
            "lease_until": lease_until,
        }
        return {row["id"] for row in await self._db.rows("renew_leases", **params)}

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
        result = {
            "id": run_id,
            "seq": seq,
            "now": now,
            "status": StepStatus.COMPLETED if ok else StepStatus.PENDING,
            "output": json_param(output) if ok else None,
            "error": None if ok else json_param(dict(error or {})),
        }

        async def work(conn: Conn) -> str:
            # The step's queue first, if it has one (the lock order), then the run and the step.
            _, rows = await pipeline(
                conn, _queue_locks(run_id, [seq]), ("step_for_result", {"id": run_id, "seq": seq})
            )
            found = _first(rows)
            if found is None or found["run_status"] in _TERMINAL or found["attempts"] != attempt:
                return "dropped"
            if fence is not None and found["fence"] is not None and fence < found["fence"]:
                return "dropped"  # an older execution's (models.older_fence)
            if found["status"] != StepStatus.RUNNING:
                await self._wake(conn, [run_id], now)
                return "duplicate"
            await pipeline(
                conn,
                ("record_step_result", result),
                ("wake", {"ids": pg_array([run_id]), "now": now}),
                _release_call(run_id, None, [seq], now) if found["queued"] else None,
            )
            return "recorded"

        return await self._db.tx(work)

    async def record_heartbeat(
        self, run_id: str, seq: int, attempt: int, at: datetime, *, fence: int | None = None
    ) -> bool:
        beat = {"id": run_id, "seq": seq, "attempt": attempt, "at": at, "fence": fence}
        return bool(await self._db.rows("record_heartbeat", **beat))

    # ---------------------------------------------------------------- turn writes (fenced)

    async def await_decision(
        self, run_id: str, owner: str, task_id: str, deadline: datetime, now: datetime
    ) -> None:
        park = {"id": run_id, "owner": owner, "task_id": task_id, "deadline": deadline, "now": now}
        row = _check_fence(_first(await self._db.rows("await_decision", **park)), run_id, owner)
        if row["pausing"]:
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
        lease = {"owner": owner, "lease_until": lease_until, "now": now, **served_params(serves)}
        rows = await self._db.rows("claim_decision", id=run_id, task_id=task_id, **lease)
        if not rows:
            return None
        return await self._handed_claim({**rows[0], "has_history": True})

    async def extend_decision(self, run_id: str, task_id: str, deadline: datetime) -> bool:
        rows = await self._db.rows("extend_decision", id=run_id, task_id=task_id, deadline=deadline)
        return bool(rows)

    async def checkpoint(
        self, run_id: str, owner: str, writes: Writes, now: datetime
    ) -> list[Started]:
        if writes.children:
            lock = _lock_call(gate_keys(writes.children))
            started, pausing = await self._db.tx(
                lambda conn: self._checkpoint_in(conn, run_id, owner, writes, now, lock)
            )
            if pausing:  # raised once the transaction committed: the writes are kept
                raise RunPausing(run_id, started)
            return started
        await self._writes.checkpoint(run_id, owner, writes, now)
        return []

    async def set_attributes(
        self,
        run_id: str,
        owner: str,
        writes: Writes,
        attributes: Mapping[str, AttributeValue],
        now: datetime,
    ) -> None:
        params = {
            **fenced_params(run_id, owner, writes),
            "attributes": dumps(dict(attributes)),
        }
        _check_fence(
            _first(await self._db.rows("set_attributes", **params, now=now)), run_id, owner
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
        status = RunStatus.BLOCKED if blocked else RunStatus.SUSPENDED

        def suspend(flushed: Writes) -> Row:
            params = fenced_params(run_id, owner, flushed)
            return {**params, "wake_at": wake_at, "now": now, "status": status.value}

        if not writes.children and not writes.events:
            row = _first(await self._db.rows("suspend", **suspend(writes)))
            return bool(_check_fence(row, run_id, owner)["rewake"])
        # Event waits: the publishers' lock, taken in a statement before the suspension, orders
        # this write with every publish; an event published while the turn ran rewakes the run.
        lock_events, rewake = _event_calls(run_id, writes.events, now)
        if not writes.children:
            rows = await self._db.batch(lock_events, ("suspend", suspend(writes)), rewake)
            return _rewoken(rows, rewake is not None, run_id, owner)

        async def work(conn: Conn) -> bool:
            # Children first: a replacing child start may wake this run (a rewake).
            lock = _lock_call(gate_keys(writes.children))
            await self._checkpoint_in(conn, run_id, owner, writes, now, lock)
            suspended = ("suspend", suspend(Writes()))
            rows = await pipeline(conn, lock_events, suspended, rewake)
            return _rewoken(rows, rewake is not None, run_id, owner)

        return await self._db.tx(work)

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
        follow = [settlement.continue_as] if settlement.continue_as is not None else []
        handler = [settlement.handler] if settlement.handler is not None else []
        # The run's singleton key is locked (with the keys its new runs go through); a run the
        # caller knows to have none needs no lock statement.
        lock = _lock_call(
            gate_keys([*writes.children, *follow, *handler]), run_id if keyed else None
        )
        if not writes.children and not follow and not handler:
            # The common case: the key lock, the writes, settlement and wakes, and the hand-over
            # of the freed slot: one round trip.
            # A queued run's slots go in the same transaction (see ``release_steps``).
            released = _release_call(run_id, None, None, now, settled=True) if queued else None
            if lock is None and released is None and successor is None:
                # No key, no queue, nothing created: made while a write is in flight, it goes
                # with the other runs' checkpoints and settlements (see ``writes``).
                grouped = await self._writes.settle(run_id, owner, writes, settlement, now)
                if grouped.queued:
                    grouped.woken.extend(await self._release_settled(run_id, now))
                return SettleResult(grouped.woken)
            params = settle_params(run_id, owner, settlement, now, writes, successor)
            if released is None and lock is not None:
                # Under its key: with the other keyed settlements made meanwhile (``writes``).
                settled = await self._keyed.settle(run_id, lock, params)
            elif released is None:
                settled = _first(await self._db.rows("settle", **params))
            else:
                *_, rows, freed = await self._db.batch(lock, ("settle", params), released)
                settled = _first(rows)
            row = _check_fence(settled, run_id, owner)
            woken = woken_by(row)
            if released is not None:
                woken += freed[0]["woken"]
            elif row["fence_queued"]:
                woken += await self._release_settled(run_id, now)
            if row["id"] is None:
                return SettleResult(woken)
            return SettleResult(woken, await self._handed_claim(row))

        async def work(conn: Conn) -> SettleResult:
            flushed, settle_lock = writes, lock
            if writes.children:
                cancelled = settlement.status == RunStatus.CANCELLED
                await self._checkpoint_in(conn, run_id, owner, writes, now, lock, cancelled)
                flushed, settle_lock = Writes(), None
            settle = ("settle", settle_params(run_id, owner, settlement, now, flushed))
            *_, rows = await pipeline(conn, settle_lock, settle)
            row = _check_fence(_first(rows), run_id, owner)
            woken = woken_by(row)
            # The continuation skips the gates (its predecessor held the place), but its key
            # is locked above so concurrent counts see it or wait for it.
            started = await self._insert_plain(conn, follow)
            woken.extend(s.run.id for s in started.values() if s.created and s.run is not None)
            was_queued.append(row["fence_queued"])
            if not handler:
                return SettleResult(woken)
            # The failure handler goes through its gates (their keys locked above), after the
            # settlement: the run no longer counts against a quota nor holds a slot.
            [outcome] = await self._create_all(conn, handler, now, locked=True)
            if outcome.rejected is not None:
                error = with_handler_error(settlement.error, outcome.rejected)
                await execute(conn, "record_error", id=run_id, error=json_param(error))
            return SettleResult([*woken, *ready_ids([outcome])], None, outcome)

        was_queued: list[bool] = []
        result = await self._db.tx(work)
        if was_queued[-1]:
            result.woken.extend(await self._release_settled(run_id, now))
        return result

    async def _handed_claim(self, leased: Row) -> Claim:
        """The claim of the waiter a settlement leased: its history read only if it has one.

        The successor's lease is held from the settlement's commit on, so nothing else writes
        its steps meanwhile; a signal sent since is read here, as a later claim would.
        """
        run = run_from_row(leased)
        if not leased["has_history"]:
            return Claim(run, [], [])
        steps, signals = await self._db.batch(
            ("steps_of", {"id": run.id}), ("signals_of", {"id": run.id})
        )
        return Claim(run, [step_from_row(s) for s in steps], [signal_from_row(s) for s in signals])

    async def _checkpoint_in(
        self,
        conn: Conn,
        run_id: str,
        owner: str,
        writes: Writes,
        now: datetime,
        lock: Call | None,
        allow_cancelling: bool = False,
    ) -> tuple[list[Started], bool]:
        """Lock, flush ``writes`` fenced and create their children, in the caller's transaction:
        what was started, and whether the run was asked to pause."""
        params = fenced_params(run_id, owner, writes, allow_cancelling=allow_cancelling)
        *_, rows = await pipeline(conn, lock, ("checkpoint", {**params, "now": now}))
        row = _check_fence(_first(rows), run_id, owner)
        return await self._create_children(conn, writes.children, now), bool(row["pausing"])

    async def _create_children(
        self, conn: Conn, specs: Sequence[RunSpec], now: datetime
    ) -> list[Started]:
        return await self._create_all(conn, specs, now, locked=True) if specs else []

    async def _finish(
        self,
        conn: Conn,
        run_id: str,
        settlement: Settlement,
        now: datetime,
        woken: list[str] | None = None,
    ) -> Run:
        """Settle a run terminal outside a turn, as ``settle_run`` does (its key lock held);
        the runs it woke go to ``woken``."""
        row = await fetch_one(conn, "settle", **settle_params(run_id, None, settlement, now))
        assert row is not None and row["written"], f"finishing unknown run {run_id!r}"
        if woken is not None:
            woken.extend(woken_by(row))
        run = await fetch_one(conn, "get_run", id=run_id)
        assert run is not None
        return run_from_row(run)

    async def _wake(self, conn: Conn, run_ids: Sequence[str], now: datetime) -> set[str]:
        """Wake the active runs among ``run_ids``; the ids that were active."""
        if not run_ids:
            return set()
        rows = await fetch_all(conn, "wake", ids=pg_array(run_ids), now=now)
        return {row["id"] for row in rows if not row["awaits_decision"]}

    # ---------------------------------------------------------------- from outside a turn

    # ---------------------------------------------------------------- step queues

    async def register_queues(self, settings: Sequence[QueueSettings], now: datetime) -> None:
        await self._db.batch(*(("register_queue", _queue_params(q, now)) for q in settings))

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
        # One round trip, one transaction: the queues' locks, the fenced flush (which locks
        # the run), the slots released, the step's entry, then the decision. The statements
        # after the flush check the lease themselves, so a failed fence writes nothing there.
        asked = {
            "id": run_id,
            "owner": owner,
            "now": now,
            "queue": request.queue,
            "seq": request.seq,
            "priority": request.priority,
            "fairness_key": request.fairness_key,
        }
        freed = _release_call(run_id, owner, release, now) if release else None
        rows = await self._db.batch(
            ("lock_queues_for", {"queue": request.queue, "id": run_id, "release": list(release)}),
            ("checkpoint", {**fenced_params(run_id, owner, writes), "now": now}),
            freed,
            ("queue_enter", asked),
            ("queue_admit", asked),
        )
        flushed, entered, decided = rows[1], rows[-2], rows[-1]
        _check_fence(_first(flushed), run_id, owner)
        if not entered[0]["known"]:
            raise step_queues.unknown_queue(request.queue)
        row = _first(decided)
        if row is None:  # the lease went between the statements' locks: nothing was decided
            raise LeaseLostError(f"lease on run {run_id!r} is no longer held by {owner}")
        woken = list(rows[2][0]["woken"]) if freed is not None else []
        return step_queues.admitted(_admission(row, retry, now), woken)

    async def release_steps(
        self, run_id: str, owner: str, writes: Writes, seqs: Sequence[int], now: datetime
    ) -> list[str]:
        # No queue lock: a release only deletes entries and wakes, and an admission deciding
        # meanwhile (under its queue's lock) at worst counts a slot that is going as held, then
        # the release wakes the waiter the slot is for. Taking the queue's lock here would
        # serialise every release behind every admission of the queue.
        flushed, released = await self._db.batch(
            ("checkpoint", {**fenced_params(run_id, owner, writes), "now": now}),
            _release_call(run_id, owner, seqs, now),
        )
        _check_fence(_first(flushed), run_id, owner)
        return list(released[0]["woken"])

    async def _release_settled(self, run_id: str, now: datetime) -> list[str]:
        """Delete a settled run's queue entries and wake their queues' next waiters, for a
        settlement that did not (its caller did not say the run was queued, or it settled
        outside a turn). Its entries counted for nothing from its settlement on, so this may
        follow in a transaction of its own; if the process dies in between, the waiters'
        fallback timers wake them."""
        [released] = await self._db.batch(_release_call(run_id, None, None, now, settled=True))
        return list(released[0]["woken"])

    async def pause_run(self, run_id: str, now: datetime) -> bool:
        async def work(conn: Conn) -> bool:
            # The run's key lock first: a waiter that leaves the line passes its wake on.
            *_, rows = await pipeline(
                conn, _lock_call((), run_id), ("pause_run", {"id": run_id, "now": now})
            )
            row = _first(rows)
            if row is None:
                raise RunNotFoundError(run_id)
            if row["left_line"]:
                key, most = row["singleton_key"], row["singleton_limit"]
                await execute(conn, "wake_free_waiters", key=key, most=most, now=now)
            return bool(row["changed"])

        return await self._db.tx(work)

    async def resume_run(self, run_id: str, now: datetime) -> bool:
        return await self._control("resume_run", run_id, now)

    async def _control(self, name: str, run_id: str, now: datetime) -> bool:
        """A pause or a resume: one statement, whether it applied (RunNotFoundError: no run)."""
        row = _first(await self._db.rows(name, id=run_id, now=now))
        if row is None:
            raise RunNotFoundError(run_id)
        return bool(row["changed"])

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: object,
        now: datetime,
        *,
        kind: StepKind = StepKind.SIGNAL,
    ) -> bool:
        async def work(conn: Conn) -> bool:
            # The row lock first, in a statement of its own (the same round trip): had the run's
            # turn just suspended it on this signal, a statement that waited for its lock would
            # still read the steps from before that commit (READ COMMITTED's snapshot is the
            # statement's) and miss the wait, leaving the run asleep with its signal delivered.
            _, targets = await pipeline(
                conn,
                ("lock_runs", {"ids": pg_array([run_id])}),
                ("signal_target", {"id": run_id, "kind": str(kind), "name": name}),
            )
            target = _first(targets)
            if target is None:
                raise RunNotFoundError(run_id)
            status = RunStatus(target["status"])
            if status.is_terminal:
                raise RunFinishedError(run_id, status)
            buffered = buffered_name(kind, name)
            signal = {"id": run_id, "name": buffered, "payload": json_param(payload), "now": now}
            await execute(conn, "insert_signal", **signal)
            if target["waits"]:
                return bool(await self._wake(conn, [run_id], now))
            if status in _LEASED or target["awaits_decision"]:
                # The turn in flight (here or on a worker) may have missed it.
                await self._wake(conn, [run_id], now)
            return False

        return await self._db.tx(work)

    async def cancel_run(
        self, run_id: str, now: datetime, error: dict[str, object] | None
    ) -> CancelResult:
        async def work(conn: Conn) -> CancelResult:
            tree = await fetch_all(conn, "run_tree", id=run_id)
            if not tree:
                raise RunNotFoundError(run_id)
            keys = [f"s:{r['singleton_key']}" for r in tree if r["singleton_key"] is not None]
            await self._lock_keys(conn, keys)
            locked = await fetch_all(conn, "lock_runs", ids=pg_array(r["id"] for r in tree))
            status = {r["id"]: r["status"] for r in locked}
            result = CancelResult()
            for target in depth_first(run_id, tree):
                if await self._cancel_one(
                    conn, target, status[target], now, error, settled, result.woken
                ):
                    result.changed.append(target)
            return result

        settled: list[Run] = []
        result = await self._db.tx(work)
        for run in settled:
            if run.queued:
                result.woken.extend(await self._release_settled(run.id, now))
        return cancel_result(result)

    async def _cancel_one(
        self,
        conn: Conn,
        run_id: str,
        status: str,
        now: datetime,
        error: dict[str, object] | None,
        settled: list[Run],
        woken: list[str],
    ) -> bool:
        """Cancel one active run (its key lock held): leased ones go to ``cancelling``; the
        others settle, and join ``settled`` (the runs they woke, ``woken``)."""
        if status in _TERMINAL or status == RunStatus.CANCELLING:
            return False
        if status == RunStatus.RUNNING:
            await execute(conn, "mark_cancelling", id=run_id, now=now, error=json_param(error))
        else:
            cancelled = Settlement(RunStatus.CANCELLED, None, error)
            settled.append(await self._finish(conn, run_id, cancelled, now, woken))
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
        def spec_of(run_id: str, row: Row | None = None) -> RunSpec:
            workflow = row["workflow"] if row is not None else ""
            return RunSpec(run_id, workflow, "", None, now, quota=quota, singleton=singleton)

        async def work(conn: Conn) -> Run:
            counts: Row | None = None
            if quota is not None or singleton is not None:
                # The keys' locks first (the lock order), counted as a start counts: no start
                # or requeue of these keys slips in before this one commits.
                counts = await fetch_one(conn, "gate_counts", **gate_params(spec_of(run_id), now))
            row = await fetch_one(conn, "lock_run_wait", id=run_id)
            if row is None:
                raise RunNotFoundError(run_id)
            if row["status"] not in _REQUEUEABLE:
                raise not_requeueable(run_id, row["status"])
            if counts is not None:
                refusal = gate_refusal(spec_of(run_id, row), counts)
                if refusal is not None:
                    raise refusal
            _, requeued = await pipeline(
                conn,
                ("drop_unfinished_steps", {"id": run_id}),
                ("requeue", {"id": run_id, "now": now, "deadline_at": deadline_at}),
            )
            return run_from_row(requeued[0])

        return await self._db.tx(work)

    async def publish_event(
        self, name: str, payload: object, event_id: str | None, now: datetime
    ) -> tuple[Event, bool, list[str]]:
        async def work(conn: Conn) -> tuple[Event, bool, list[str]]:
            await execute(conn, "lock_events")
            if event_id is not None:
                first = await fetch_one(conn, "event_by_id", event_id=event_id)
                if first is not None:
                    return event_from_row(first), False, []
            params = {"event_id": event_id, "name": name, "payload": json_param(payload)}
            row = await fetch_one(conn, "insert_event", now=now, **params)
            assert row is not None
            waiting = [r["id"] for r in await fetch_all(conn, "event_waiters", name=name)]
            awake = await self._wake(conn, waiting, now)
            return event_from_row(row), True, [w for w in waiting if w in awake]

        return await self._db.tx(work)

    async def events_after(self, name: str, after_seq: int, limit: int) -> list[Event]:
        params = {"name": name, "after": after_seq, "limit": limit}
        rows = await self._db.rows("events_after", **params)
        return [event_from_row(row) for row in rows]

    async def latest_event_seq(self) -> int:
        row = _first(await self._db.rows("latest_event_seq"))
        return int(row["seq"]) if row is not None else 0

    # ---------------------------------------------------------------- reads

    async def get_run(self, run_id: str) -> Run | None:
        row = _first(await self._db.rows("get_run", id=run_id))
        return run_from_row(row) if row is not None else None

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        runs = await self._runs(run_ids)
        return {run.id: run for run in runs}

    async def _runs(self, run_ids: Sequence[str]) -> list[Run]:
        rows = await self._db.rows("get_runs", ids=pg_array(run_ids)) if run_ids else []
        return [run_from_row(row) for row in rows]

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
        filters = {
            "workflow": workflow,
            "status": status,
            "tag": tag,
            "parent_id": parent_id,
            "namespace": namespace,
        }
        given: Row = {
            k: (str(v) if k == "status" else v) for k, v in filters.items() if v is not None
        }
        given.update(attribute_params(attributes))
        rows = await self._filtered(_listing("list_runs", given), given, limit=limit, offset=offset)
        return [run_from_row(row) for row in rows]

    async def page_runs(self, query: RunQuery, limit: int) -> list[Run]:
        given = query_params(query, cursor=True)
        rows = await self._filtered(_listing("page_runs", given), given, limit=limit)
        return [run_from_row(row) for row in rows]

    async def count_runs(self, query: RunQuery) -> dict[RunStatus, int]:
        given = query_params(query, cursor=False)
        rows = await self._filtered(_listing("count_runs", given), given)
        return {RunStatus(row["status"]): int(row["runs"]) for row in rows}

    async def prune_runs(self, cutoffs: Mapping[RunStatus, datetime], limit: int) -> list[str]:
        due = {status: before for status, before in cutoffs.items() if status.is_terminal}
        if not due or limit < 1:
            return []
        rows = await self._db.rows(
            "prune_runs",
            statuses=[str(status) for status in due],
            cutoffs=list(due.values()),
            limit=limit,
        )
        return [row["id"] for row in rows]

    async def prune_events(self, before: datetime, limit: int) -> int:
        if limit < 1:
            return 0
        rows = await self._db.rows("prune_events", before=before, limit=limit)
        return len(rows)

    async def queue_views(self) -> list[QueueView]:
        rows, entries, keys = await self._db.batch(
            ("queue_rows", {}), ("queue_live_entries", {}), ("queue_keys", {})
        )
        return step_queues.views_of(
            [step_queues.row_from(r, r["window_start"]) for r in rows],
            [step_queues.entry_from(e, e["admitted_at"]) for e in entries],
            {(k["queue"], k["fairness_key"]): int(k["served"]) for k in keys},
        )

    async def run_activity(
        self, since: datetime, until: datetime, namespace: str | None = None
    ) -> list[ActivityCount]:
        rows = await self._db.rows("run_activity", since=since, until=until, namespace=namespace)
        return [
            ActivityCount(
                datetime.fromtimestamp(int(row["minute"]) * 60, UTC),
                None if row["status"] is None else RunStatus(row["status"]),
                row["bucket"],
                int(row["runs"]),
            )
            for row in rows
        ]

    async def active_run_counts(
        self, namespace: str | None = None
    ) -> dict[tuple[str, RunStatus], int]:
        rows = await self._db.rows("active_run_counts", namespace=namespace)
        return {(row["workflow"], RunStatus(row["status"])): int(row["runs"]) for row in rows}

    async def active_code_counts(self, namespace: str | None = None) -> dict[tuple[str, str], int]:
        rows = await self._db.rows("active_code_counts", namespace=namespace)
        return {(row["workflow"], row["version"]): int(row["runs"]) for row in rows}

    # ---------------------------------------------------------------- engines

    async def announce_engine(self, info: EngineInfo) -> None:
        await self._db.rows("announce_engine", **engine_params(info))

    async def beat_engine(self, engine_id: str, at: datetime) -> bool:
        return bool(await self._db.rows("beat_engine", id=engine_id, at=at))

    async def remove_engine(self, engine_id: str) -> None:
        await self._db.rows("remove_engine", id=engine_id)

    async def list_engines(self) -> list[EngineInfo]:
        return [engine_from_row(row) for row in await self._db.rows("list_engines")]

    async def prune_engines(self, before: datetime) -> int:
        return len(await self._db.rows("prune_engines", before=before))

    async def append_audit(self, entry: AuditEntry) -> AuditEntry:
        [row] = await self._db.rows("append_audit", **audit_params(entry))
        return replace(entry, id=row["id"])

    async def list_audit(
        self, limit: int, *, before: int | None = None, namespace: str | None = None
    ) -> list[AuditEntry]:
        rows = await self._db.rows("list_audit", limit=limit, before=before, namespace=namespace)
        return [audit_from_row(row) for row in rows]

    async def lane_runs(self, lane: str | None = None) -> list[Run]:
        if lane is None:
            return [run_from_row(row) for row in await self._db.rows("lane_runs")]
        return [run_from_row(row) for row in await self._db.rows("lane_runs_of_key", lane=lane)]

    async def lane_members(
        self, shown: int, namespace: str | None = None, key: str | None = None
    ) -> list[LaneMember]:
        # With a key, the statement keeps the lanes whose stored key ends in it; the exact
        # match (a key may hold a colon) is made here.
        made = lane_member_from_plain
        members = await self._db.made_rows(
            "lane_members", made, shown=shown, namespace=namespace, key=key
        )
        return of_lane_key(members, key)

    async def limited_runs(self, now: datetime) -> list[Run]:
        return [run_from_row(row) for row in await self._db.rows("limited_runs", now=now)]

    async def _filtered(self, name: str, given: Row, **params: object) -> list[Row]:
        """Statement ``name`` with the WHERE clause of the filters in ``given``."""
        query = filtered(SQL[name], given)

        async def work(conn: Conn) -> list[Row]:
            cur = await conn.execute(query, {**given, **params})
            return await cur.fetchall()

        return await self._db.run(work)

    # ---------------------------------------------------------------- schedules

    async def save_schedule(self, schedule: StoredSchedule) -> StoredSchedule:
        params = {
            "id": schedule.id,
            "definition": json_param(schedule.definition),
            "paused": schedule.paused,
            "next_window_at": schedule.next_window_at,
            "next_fire_at": schedule.next_fire_at,
            "created_at": schedule.created_at,
            "updated_at": schedule.updated_at,
        }
        [row] = await self._db.rows("save_schedule", **params)
        return schedule_from_row(row)

    async def get_schedule(self, schedule_id: str) -> StoredSchedule | None:
        row = _first(await self._db.rows("get_schedule", id=schedule_id))
        return schedule_from_row(row) if row is not None else None

    async def list_schedules(self) -> list[StoredSchedule]:
        return [schedule_from_row(row) for row in await self._db.rows("list_schedules")]

    async def delete_schedule(self, schedule_id: str) -> bool:
        return bool(await self._db.rows("delete_schedule", id=schedule_id))

    async def due_schedules(
        self, now: datetime, limit: int, *, workflows: Collection[str] | None = None
    ) -> list[StoredSchedule]:
        names = None if workflows is None else pg_array(sorted(workflows))
        rows = await self._db.rows("due_schedules", now=now, limit=limit, workflows=names)
        return [schedule_from_row(row) for row in rows]

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
        advance = {
            "id": schedule_id,
            "expected": expected,
            "next_window": next_window,
            "next_fire": next_fire,
            "now": now,
        }

        async def work(conn: Conn) -> list[Started] | None:
            # The schedule's row first, then the keys' locks: only schedule operations lock a
            # schedule's row, and none of them holds a key's lock meanwhile.
            if await fetch_one(conn, "advance_schedule", **advance) is None:
                return None
            started = await self._create_all(conn, specs, now) if specs else []
            if specs:
                run_id, error = admission.last_fire(started, window)
                record = {"id": schedule_id, "run_id": run_id, "error": json_param(error)}
                await execute(conn, "record_schedule_fire", **record)
            return started

        return await self._db.tx(work)

    async def fire_windows(
        self, fires: Sequence[WindowFire], now: datetime
    ) -> list[list[Started] | None]:
        if not fires:
            return []
        specs = [fire.spec for fire in fires if fire.spec is not None]
        ids = pg_array(fire.schedule_id for fire in fires)
        params = {"fires": fires_param(fires), "schedule_ids": ids, "now": now}
        if any(gated(spec) for spec in specs):
            return await self._db.tx(lambda conn: self._fire_gated(conn, fires, params, now))
        # Ungated runs: the compare-and-sets and the inserts in one statement, one round trip.
        *rows, last = await self._db.rows("fire_windows", **params, **specs_params(specs))
        moved, created = set(last["moved"]), {row["id"] for row in rows}
        fired = {f.schedule_id: f.spec for f in fires if f.schedule_id in moved and f.spec}
        # A window's run that existed already (started with its id by hand) is read back.
        found = await self._runs([spec.id for spec in fired.values() if spec.id not in created])
        existing = {run.id: Started(run, created=False) for run in found}
        started = {
            schedule_id: Started(run_from_spec(spec), created=True)
            if spec.id in created
            else existing[spec.id]
            for schedule_id, spec in fired.items()
        }
        return window_results(fires, moved, started)

    async def _fire_gated(
        self, conn: Conn, fires: Sequence[WindowFire], params: Row, now: datetime
    ) -> list[list[Started] | None]:
        """A batch with gated runs: the compare-and-sets (the schedules' rows first, then the
        keys' locks, as ``fire_schedule``), the starts through their gates, each outcome."""
        moved = {row["schedule_id"] for row in await fetch_all(conn, "advance_schedules", **params)}
        won = [fire for fire in fires if fire.schedule_id in moved and fire.spec is not None]
        started = dict(
            zip(
                (fire.schedule_id for fire in won),
                await self._create_all(conn, [fire.spec for fire in won if fire.spec], now),
                strict=True,
            )
        )
        if won:
            records = [_fire_record(fire, started[fire.schedule_id]) for fire in won]
            await execute(conn, "record_schedule_fires", records=json_param(records))
        return window_results(fires, moved, started)

    async def get_step(self, run_id: str, seq: int) -> StepRecord | None:
        row = _first(await self._db.rows("get_step", id=run_id, seq=seq))
        return step_from_row(row) if row is not None else None

    async def get_reply(self, run_id: str, update_id: str) -> StepRecord | None:
        row = _first(await self._db.rows("reply_to", id=run_id, update=update_id))
        return step_from_row(row) if row is not None else None

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        rows = await self._db.rows("steps_of", id=run_id)
        return [step_from_row(row) for row in rows]

    async def list_signals(self, run_id: str) -> list[Signal]:
        rows = await self._db.rows("signals_of", id=run_id)
        return [signal_from_row(row) for row in rows]


def _event_calls(
    run_id: str, waits: Sequence[tuple[str, int]], now: datetime
) -> tuple[Call | None, Call | None]:
    """A suspension's event waits: the publishers' lock, and the rewake if an event a wait has
    not read exists (``rewake_for_events``); neither without waits."""
    if not waits:
        return None, None
    names, afters = zip(*waits, strict=True)
    params = {"id": run_id, "now": now, "names": pg_array(names), "afters": pg_array(afters)}
    return ("lock_events", {}), ("rewake_for_events", params)


def _rewoken(results: list[list[Row]], checked: bool, run_id: str, owner: str) -> bool:
    """Whether a suspension (``suspend``, after the lock when ``checked``) left the run due."""
    rows = results[1] if checked else results[0]
    rewake = bool(_check_fence(_first(rows), run_id, owner)["rewake"])
    return rewake or (checked and bool(results[2]))


def _lock_call(keys: Sequence[str], run_id: str | None = None) -> Call | None:
    """The ``lock_keys`` statement for ``keys`` and ``run_id``'s singleton key; None if none."""
    if not keys and run_id is None:
        return None
    return ("lock_keys", {"keys": pg_array(keys), "run_id": run_id})


def _queue_params(settings: QueueSettings, now: datetime) -> Row:
    return {
        "name": settings.name,
        "concurrency": settings.concurrency,
        "rate_limit": settings.rate_limit,
        "rate_period": settings.rate_period,
        "fairness": settings.fairness,
        "arrival": settings.order,
        "now": now,
    }


def _queue_locks(run_id: str, seqs: Sequence[int] | None) -> Call:
    return ("lock_queues_of", {"id": run_id, "seqs": None if seqs is None else list(seqs)})


def _release_call(
    run_id: str,
    owner: str | None,
    seqs: Sequence[int] | None,
    now: datetime,
    *,
    lost_turn: bool = False,
    settled: bool = False,
) -> Call:
    """``queue_release`` of the run's entries at ``seqs`` (None: all): fenced by ``owner``'s
    lease, or (``settled``) only once the run is settled."""
    return (
        "queue_release",
        {
            "id": run_id,
            "owner": owner,
            "seqs": None if seqs is None else list(seqs),
            "lost_turn": lost_turn,
            "settled": settled,
            "now": now,
        },
    )


def _admission(row: Row, retry: RetryTimer, now: datetime) -> Admission:
    """What a ``queue_admit`` row means (see ``step_queues.admit``, which it mirrors)."""
    if row["admit"]:
        return Admission(True)
    limit, period, window = row["rate_limit"], row["rate_period"], row["win"]
    if window is not None and limit is not None and row["used"] >= limit:
        again = window + timedelta(seconds=period)
    else:
        again = step_queues.fallback(retry, now, row["denials"])
    return Admission(False, again, tuple(row["woken"]))


def _fire_record(fire: WindowFire, started: Started) -> Row:
    run_id, error = admission.last_fire([started], fire.window)
    return {"id": fire.schedule_id, "run_id": run_id, "error": error}


def _replaces(spec: RunSpec) -> bool:
    return spec.singleton is not None and spec.singleton.replace


def _claimed(run: Row, steps: list[Row], signals: list[Row]) -> ClaimOutcome:
    return ClaimOutcome(
        claim=Claim(
            run_from_row(run),
            [step_from_row(s) for s in steps],
            [signal_from_row(s) for s in signals],
        )
    )


def _peeked(row: Row) -> Row:
    """The unlocked view of the run that came back with a ``claim_plain`` that claimed nothing."""
    return {
        key.removeprefix("peek_"): value for key, value in row.items() if key.startswith("peek_")
    }


def _recoverable(peek: Row, now: datetime) -> bool:
    """Whether a run the one-round-trip claim left alone has an expired lease to recover."""
    return peek["status"] in _LEASED and claimable(peek, now)


def _held(peek: Row) -> bool:
    """Whether a handed-off timer's run was left alone only because its row was locked at that
    instant (``SKIP LOCKED``: a signal or a result being recorded): its wake time stands a lease
    ahead, so the claim must wait for the lock rather than leave the run until then."""
    return peek["status"] in (RunStatus.SUSPENDED, RunStatus.BLOCKED)


def _listing(name: str, given: Row) -> str:
    """The listing statement for the filters ``given``: a filter on attributes has its own,
    which reads the runs from the entries of its first attribute."""
    return f"{name}_by_attributes" if "attributes" in given else name


def _first(rows: list[Row]) -> Row | None:
    return rows[0] if rows else None


def _check_fence(row: Row | None, run_id: str, owner: str | None) -> Row:
    """A fenced statement's row, once it shows that the writes went ahead."""
    error = fence_error(row, run_id, owner)
    if error is not None:
        raise error
    assert row is not None
    return row


__all__ = ["PostgresStore", "upgrade"]
