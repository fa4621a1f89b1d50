"""The execution side of an engine: claim -> turn -> outcome, where due runs go, the loop.

:class:`~runlane.engine.Engine` is what users call; everything it does not answer itself
happens here. An :class:`Execution` owns the runs executing on this instance (``LocalRuns``),
the leases their turns hold, the run queue and remote steps' consumers, and the loop that finds
due work. Where a run made due goes is decided once, in :meth:`Execution.send`, by the table in
:mod:`runlane.routing`. It is the host of every turn (``turn.TurnHost``), of the run queue
(``run_queue.RunSink``) and of remote steps (``remote.dispatch.RemoteHost``; its turns get the
remote-step driver, ``remote.steps.RemoteSteps``): none of them sees the engine.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal

from .clock import Clock
from .definitions import Concurrency, StepDefinition, WorkflowDefinition
from .errors import ExecutionTimeoutError, error_dict
from .faults import OutageLog, is_infrastructure
from .leased_wakes import LeasedWakes
from .leases import LeaseKeeper
from .local_runs import LocalRuns
from .loop import Loop
from .models import (
    JSON,
    CancelResult,
    Claim,
    ClaimOutcome,
    Lease,
    RetryTimer,
    Run,
    RunSpec,
    RunStatus,
    Serves,
    Settlement,
    SingletonGate,
    Started,
    dead_settlement,
)
from .options import EngineOptions
from .payloads import Payloads
from .presence import Presence
from .registry import Registry
from .releases import Releases
from .remote.dispatch import RemoteDispatch
from .remote.steps import RemoteSteps
from .remote.tasks import Decision
from .remote.turns import RemoteTurns, apply_decision
from .retention import CATCH_UP_PAUSE, Pruner
from .routing import Mode, Reason, Recently, Where, where
from .run_queue import RunQueue
from .schedules import Scheduler
from .specs import RunSpecs
from .stats import REFUSAL_REASONS, EngineStats
from .stores.base import Store
from .tracing import Tracing
from .transports.addresses import code, decision_queue
from .transports.base import Transport
from .turn import RemoteStepDriver, Turn, TurnOutcome
from .updates import Answers
from .watchers import RunWatchers

log = logging.getLogger(__name__)

MISSED_AFTER = 10.0
"""Seconds after which a schedule's window not fired yet counts as missed (see ``catchup``)."""

_DENY_IN_ONE_WRITE = 8
"""A timer poll that found this many due runs or more first denies, in one write, the retries
of singleton waiters whose key is full (``Store.park_full_waiters``); a smaller batch (a lone
sleeper's wake) costs no round trip more."""


class Execution:
    """Executes one engine's runs: see the module's docstring."""

    def __init__(
        self,
        *,
        engine_id: str,
        store: Store,
        transport: Transport | None,
        registry: Registry,
        options: EngineOptions,
        clock: Clock,
        namespace: str | None,
        drive: bool,
        has_queues: bool,
        pruner: Pruner | None,
        tracing: Tracing,
        ready: Callable[[], Awaitable[None]],
        payloads: Payloads | None = None,
    ) -> None:
        self.id = engine_id
        self.payloads = payloads or Payloads(None)
        self.clock = clock
        self.namespace = namespace
        self.drive = drive
        self.options = options
        self.specs = RunSpecs(registry, store, self.now, namespace, self.admission_retry)
        self._store = store
        self.has_queues = has_queues
        self.pruner = pruner
        self.stats = EngineStats()
        self.tracing = tracing
        self.answers = Answers()
        self.watchers = RunWatchers(also=self.answers.notify)
        self.outage = OutageLog(log, on_recovered=self.poll_soon)
        self.leases = LeaseKeeper(store, self.now, lambda: self.options.lease, self.outage)
        self.releases = Releases(lambda: self.store, self.now, self.outage)
        self.presence = Presence(
            engine_id, lambda: self.store, self.now, lambda: self.options.lease, self.outage
        )
        self.run_queue = (
            RunQueue(self, transport) if transport is not None and transport.has_run_queue else None
        )
        self.remote = RemoteDispatch(self, transport) if transport is not None else None
        self.remote_driver: RemoteStepDriver | None = (
            RemoteSteps(self.remote) if self.remote is not None else None
        )
        self.remote_turns = RemoteTurns(self, transport) if transport is not None else None
        self.schedules = Scheduler(_SchedulerHost(self, ready))
        # A dead run of these starts a handler: the claim that finds it dead leaves it to us.
        self._dead_letters = registry.dead_letters
        # Decisions claimed by the results consumer, by lease owner, for the turn that applies it.
        self._decisions: dict[str, Decision] = {}
        self._tokens = itertools.count(1)
        self._local: LocalRuns | None = None
        self.leased_wakes = LeasedWakes(self)
        self._accepting = True
        self._consuming = False
        self.loop = Loop(
            self.tick,
            now=self.now,
            poll_interval=lambda: self.options.poll_interval,
            outage=self.outage,
            accepting=lambda: self._accepting,
        )
        self._prune_task: asyncio.Task[None] | None = None
        self._serves: tuple[Registry, Serves] | None = None
        # Expired runs this instance sent through the run queue: each once per lease, however
        # many polls find it before an instance claims it.
        self._recovering = Recently(lambda: self.options.lease)

    # ---------------------------------------------------------------- what it runs against

    @property
    def store(self) -> Store:
        return self._store

    @store.setter
    def store(self, store: Store) -> None:
        self._store = self.specs.store = store

    @property
    def registry(self) -> Registry:
        return self.specs.registry

    @registry.setter
    def registry(self, registry: Registry) -> None:
        self.specs.registry = registry

    @property
    def serves(self) -> Serves:
        """The ``(workflow, version)`` pairs whose runs this engine claims: those it can replay."""
        registry = self.specs.registry
        if self._serves is None or self._serves[0] is not registry:
            self._serves = (registry, registry.serves)
        return self._serves[1]

    def now(self) -> datetime:
        return self.clock.now()

    # ---------------------------------------------------------------- lifecycle

    def open(self) -> None:
        """Each time the engine opens (its store first): the local runs and the loop's wake-up."""
        self._local = LocalRuns(
            self._execute, self._follow_up, lambda: self._accepting, self.options.max_local_runs
        )
        self.loop.open()

    def start_loop(self) -> None:
        self._accepting = True
        if self.drive:
            self.loop.start(name=f"runlane-engine-{self.id}")

    def start_consumers(self) -> None:
        """Consume the run queue, remote step results and heartbeats (if there is a transport)."""
        self._accepting = True
        self._consuming = True
        if self.run_queue is not None:
            self.run_queue.start_consuming()
        if self.remote is not None:
            self.remote.start()

    async def drain(self, timeout: float) -> None:
        """Stop taking new work and wait up to ``timeout`` seconds for turns in flight.

        The run-queue consumer stops first; runs it took but had not started go back to the
        queue, and runs waiting here for a turn's slot are dropped (they stay due in the store);
        then the turns in flight finish (a turn still running at the timeout is cancelled
        and its lease expires, so another instance recovers it), and the wakes taken for those
        runs meanwhile go back too, now that another instance can claim them.
        """
        self._accepting = False
        self._consuming = False
        self.leased_wakes.drop()  # their runs stay in the store, for the lease's expiry
        in_flight = set(self._local.running) if self._local is not None else set()
        if self.run_queue is not None:
            await self.run_queue.stop_consuming()
            await self.run_queue.hand_back(keep=in_flight)
        await self.loop.stop()
        if self._prune_task is not None:
            # A batch is one short statement: let it commit rather than roll it back.
            await asyncio.gather(self._prune_task, return_exceptions=True)
        if self._local is not None:
            await self._local.wait(timeout)
        if self.run_queue is not None:
            await self.run_queue.hand_back()
            await self.run_queue.flushed()
        if self.remote is not None:
            await self.remote.stop()
        await self.releases.retry()  # what an outage kept back, if the store answers now
        await self.leases.stop()

    # ---------------------------------------------------------------- where due runs go

    def mode(self) -> Mode:
        if self.run_queue is not None and self._consuming:
            return Mode.FLEET
        if self.run_queue is not None and not self.drive:
            return Mode.PRODUCER
        if self._accepting and (self.loop.running or self._consuming):
            return Mode.ALONE
        return Mode.IDLE

    def where(self, reason: Reason) -> Where:
        return where(self.mode(), reason, room=self.room() > 0)

    def send(self, run_ids: Iterable[str], reason: Reason = Reason.WAKE) -> None:
        """Runs made due in the store: to the run queue, to local tasks, or left there."""
        ids = list(run_ids)
        if ids:
            self._send_to(self.where(reason), ids)

    def send_started(self, runs: Sequence[Run]) -> None:
        """Runs just created and due (their message carries their namespace and priority)."""
        destination = self.where(Reason.START)
        if destination is Where.QUEUE and self.run_queue is not None:
            self.run_queue.publish_starts(runs)
        else:
            self._send_to(destination, [r.id for r in runs])

    def _send_to(self, destination: Where, ids: list[str]) -> None:
        if destination is Where.QUEUE and self.run_queue is not None:
            self.run_queue.publish_wakes(ids)
        elif destination is Where.HERE and self._local is not None:
            self._local.spawn_all(ids)

    def cancelled(self, result: CancelResult) -> None:
        """A cancellation made in the store: its waiters hear of the runs it settled, turns
        here waiting in memory for a remote step of a cancelled run stop waiting, and the runs
        it woke (a freed slot's waiters, parents) run now, not at the next timer poll."""
        self.watchers.notify(result.changed)
        if self.remote is not None:
            self.remote.interrupt(result.changed)
        self.send(result.woken)

    def wake(self, run_ids: Iterable[str]) -> None:
        """Runs the store just woke (a freed slot's waiters): see ``send``."""
        self.send(run_ids, Reason.WAKE)

    def answered(self, run_id: str) -> None:
        """A turn here wrote a reply to an update of the run: its callers here read it now."""
        self.answers.notify([run_id])

    def lease(self, reason: Reason) -> Lease | None:
        """A lease for a run this instance will execute at once (written with the store call
        that makes it due), or None when it would not run it here now."""
        if self.where(reason) is not Where.HERE or self.room() <= 0:
            return None
        until = self.now() + timedelta(seconds=self.options.lease)
        return Lease(self._owner(), until)

    def successor_lease(self) -> Lease | None:
        """A lease for the singleton waiter a settlement here hands its slot to (only a
        waiter whose code this engine serves: another is woken for an engine that does)."""
        lease = self.lease(Reason.LANDED)
        return None if lease is None else replace(lease, serves=self.serves)

    def claimed(self, claim: Claim) -> None:
        """A run already leased to this instance: its turn starts here."""
        if self._local is not None:
            self._local.spawn(claim.run.id, claim=claim)

    def _follow_up(self, woken: list[str]) -> bool:
        """Runs a turn here woke; False when they are the local task's to run."""
        if self.where(Reason.FOLLOW_UP) is not Where.QUEUE:
            return False
        self.send(woken, Reason.FOLLOW_UP)
        return True

    # ---------------------------------------------------------------- the run queue's sink

    def groups(self) -> set[str]:
        """The worker groups this engine's remote workflows and registered remote steps use."""
        registry = self.registry
        workflows = {d.group for d in registry.every_version if d.group is not None}
        return workflows | {s.group for s in registry.steps if s.group is not None}

    def decision_queues(self) -> list[str]:
        """The decision queues of the remote workflows this engine serves."""
        remote = (d for d in self.registry.every_version if d.group is not None)
        return sorted({decision_queue(code(d.name, d.version)) for d in remote})

    def room(self) -> int:
        return self._local.room() if self._local is not None else 0

    async def room_freed(self) -> None:
        assert self._local is not None
        await self._local.room_freed()

    def take(self, run_id: str, *, handoff: bool) -> None:
        """A run message taken off the run queue (``handoff``: a handed-off timer's)."""
        self._spawn(run_id, handoff=handoff)

    def executing(self, run_id: str) -> bool:
        return self._local is not None and run_id in self._local.inflight

    @property
    def accepting(self) -> bool:
        return self._accepting

    def wake_here(self, run_id: str) -> None:
        """A wake to try on a local task of this instance (a refused wake tried again)."""
        if self._local is not None:
            self._local.spawn(run_id)

    def _spawn(
        self, run_id: str, *, handoff: bool = False, poll: bool = False
    ) -> asyncio.Task[None]:
        assert self._local is not None
        return self._local.spawn(run_id, handoff=handoff, poll=poll)

    # ---------------------------------------------------------------- claim -> turn -> outcome

    def _owner(self) -> str:
        return f"{self.id}:{next(self._tokens)}"

    async def _execute(
        self,
        run_id: str,
        handoff: bool = False,
        claim: Claim | None = None,
        polled: bool = False,
    ) -> list[str]:
        """Claim the run (or use ``claim``) and drive one turn; returns runs to execute next.
        ``polled``: a poll found the run (a refused claim then means another instance has it)."""
        verdict = None
        released = None
        if claim is None:
            try:
                outcome = await self._claim(run_id, handoff)
            except Exception as exc:
                if not is_infrastructure(exc):
                    raise
                # The run stays claimable in the store: a later poll takes it.
                self.outage.failed(exc, f"claiming run {run_id}")
                return []
            claim = outcome.claim
            if claim is None:
                if outcome.unserved:
                    self._unserved(run_id)
                elif not (polled or outcome.parked or outcome.settled):
                    await self.leased_wakes.refused(run_id)
                return []
            if outcome.dying:
                verdict = dead_settlement(claim.run.recoveries, self.options.max_recovery_attempts)
            if outcome.handed_off_at is not None:
                released = (self.now() - outcome.handed_off_at).total_seconds()
        verdict = verdict or self._unreadable(claim)
        definition = self.registry.workflow(claim.run.workflow, claim.run.version)
        owner = claim.run.lease_owner or ""
        self.stats.turn_began(run_id, claim.run.workflow, released)
        run = claim.run
        with self.tracing.turn(run.id, run.workflow, run.recoveries + 1):
            result = await self._drive(claim, owner, definition, verdict)
        return self._outcome(run, result)

    def _unreadable(self, claim: Claim) -> Settlement | None:
        """A claimed run whose payloads do not decode is failed with the error that says so
        (never run, never left to be claimed again; logged as any failed run is): the
        settlement that does it, or None."""
        refused = self.payloads.unreadable(claim)
        if refused is None:
            return None
        return Settlement(RunStatus.FAILED, None, error_dict(refused, with_traceback=False))

    def _unserved(self, run_id: str) -> None:
        """A run made due here whose code this engine does not serve (a result landed here, a
        waiter a settlement here woke): through the run queue, an engine that serves it takes
        it; without one, it is due in the store, where that engine's poll finds it."""
        if self.run_queue is not None:
            self.run_queue.publish_wakes([run_id])

    def _outcome(self, run: Run, result: TurnOutcome) -> list[str]:
        """Act on a turn's outcome; returns the runs it woke (its own id: another turn now)."""
        if result.outage is not None:
            self.outage.failed(result.outage, f"executing run {run.id}")
        if result.unreleased is not None:
            self.releases.defer(result.unreleased)
        elif self.outage.down:
            self.outage.succeeded()
        if result.state == "settled":
            self._count_settled(run, result)
        if result.successor is not None:
            self.claimed(result.successor)
        if result.state == "settled":
            self.watchers.notify([run.id], result.settled)
        elif result.state == "rewake":
            return [run.id]
        elif result.wake_at is not None:
            self.loop.note_wake(result.wake_at)
        return result.woken

    async def _drive(
        self,
        claim: Claim,
        owner: str,
        definition: WorkflowDefinition,
        verdict: Settlement | None,
    ) -> TurnOutcome:
        """One turn: a worker's decision applied, a turn sent to a remote workflow's worker,
        or the body replayed here."""
        decision = self._decisions.pop(owner, None)
        if decision is not None:
            drive = functools.partial(apply_decision, decision=decision)
            return await Turn(self, claim, owner, definition).execute(verdict, drive)
        if definition.group is not None and verdict is None and self.remote_turns is not None:
            return await self.remote_turns.send(claim, owner, definition)
        return await Turn(self, claim, owner, definition).execute(verdict)

    def _count_settled(self, run: Run, result: TurnOutcome) -> None:
        status = result.settled.status if result.settled is not None else "unknown"
        self.stats.finished(run.workflow, str(status))
        if result.settled is not None and status in (RunStatus.FAILED, RunStatus.DEAD):
            _log_failure(result.settled)
        freed = list(result.woken)
        if result.successor is not None:
            freed.append(result.successor.run.id)
        self.stats.slot_freed(freed)

    def count_starts(self, workflow: str, started: Iterable[Started]) -> None:
        for one in started:
            if one.rejected is not None:
                reason = REFUSAL_REASONS.get(type(one.rejected).__name__, "other")
                self.stats.refused(workflow, reason)
            elif one.created:
                self.stats.started(workflow)

    async def apply_decision(self, decision: Decision) -> None:
        """Lease the run for a worker's decision, if it still awaits that turn, and apply it on
        a local task; a decision for a turn no longer awaited is dropped."""
        now = self.now()
        owner = self._owner()
        lease_until = now + timedelta(seconds=self.options.lease)
        claim = await self.store.claim_decision(
            decision.run_id, decision.task_id, owner, now, lease_until, serves=self.serves
        )
        if claim is None:
            log.debug("run %s: decision %s dropped", decision.run_id, decision.task_id)
            return
        self._decisions[owner] = decision
        self.claimed(claim)

    async def _claim(self, run_id: str, handoff: bool) -> ClaimOutcome:
        if self.run_queue is not None and not self.run_queue.claiming(run_id):
            return ClaimOutcome()
        now = self.now()
        outcome = await self.store.claim_run(
            run_id,
            self._owner(),
            now,
            now + timedelta(seconds=self.options.lease),
            singleton_retry=self.admission_retry(),
            max_recoveries=self.options.max_recovery_attempts,
            handoff=handoff,
            dead_letters=self._dead_letters,
            serves=self.serves,
        )
        if outcome.settled is not None:
            self.watchers.notify([run_id], outcome.settled)
        return outcome

    def admission_retry(self) -> RetryTimer:
        """The fallback timer of a denied admission (a singleton waiter's, a queued step's),
        jittered for each denial so waiters parked together do not all come back together."""
        return RetryTimer(
            self.options.singleton_retry, self.options.lease, random.uniform(0.75, 1.25)
        )

    # ---------------------------------------------------------------- what turns need

    async def child_spec(
        self, workflow: Any, input: JSON, run_id: str, parent: Run, *, detached: bool = False
    ) -> RunSpec:
        return await self.specs.child(workflow, input, run_id, parent, detached=detached)

    async def continuation_spec(self, run: Run, input: JSON) -> RunSpec:
        return await self.specs.continuation(run, input)

    async def handler_spec(self, workflow: str, run: Run, settlement: Settlement) -> RunSpec:
        return await self.specs.handler(workflow, run, settlement)

    def resolve_step(
        self, fn_or_name: Callable[..., Any] | str, group: str | None
    ) -> StepDefinition:
        return self.registry.step(fn_or_name, group)

    async def call_step(self, definition: StepDefinition, input: JSON) -> JSON:
        return await definition.call(input)

    # ---------------------------------------------------------------- the loop

    def poll_soon(self) -> None:
        """Look for due work now rather than at the next poll interval."""
        self.loop.poll_soon()

    def note_held(self, runs: Iterable[Run]) -> None:
        """Runs held by a throttle or a debounce begin by their timer: the loop comes back then."""
        now = self.now()
        for run in runs:
            if run.held(now) and run.wake_at is not None:
                self.loop.note_wake(run.wake_at)

    def _in_loop(self) -> bool:
        return self.drive and self.loop.inside()

    # ---------------------------------------------------------------- the loop phases

    async def tick(self) -> int:
        """One pass of every phase, executing what is due by the engine clock; returns turns run."""
        # Runs an outage kept this engine from giving back go back before any recovery pass
        # (which would count them recovered); due now, the timer phase picks them up.
        await self.releases.retry()
        await self.presence.beat_if_due()
        total = await self.sweep_timeouts()
        total += await self.recover_incomplete()
        total += await self.resume_due_timers()
        total += await self.fire_schedules()
        total += await self.run_pending()
        await self.prune_retained()
        return total

    async def prune_retained(self) -> int:
        """Delete one batch of settled runs past their ``retention`` period, when one is due.

        In the driving loop the batch runs beside the turns, in a task of its own, so a prune
        never delays a pass; called directly (a test's ``tick``) it is awaited. Returns the runs
        deleted (0 when the batch went to the background).
        """
        pruner = self.pruner
        if pruner is None or not pruner.due() or self._prune_task is not None:
            return 0
        if self._in_loop():
            self._prune_task = asyncio.create_task(self._prune_beside())
            return 0
        return len((await pruner.run_batch()).runs)

    async def _prune_beside(self) -> None:
        pruner = self.pruner
        assert pruner is not None
        try:
            # A backlog goes batch after batch, a short pause between, without waiting for
            # the loop's next pass; then one pass per interval.
            while (await pruner.run_batch()).full(pruner.retention.batch) and self._accepting:
                await asyncio.sleep(CATCH_UP_PAUSE)
        except Exception as exc:
            if is_infrastructure(exc):
                self.outage.failed(exc, "pruning settled runs")
            else:
                log.exception("pruning settled runs failed; retrying at the next interval")
        finally:
            self._prune_task = None

    async def fire_schedules(self) -> int:
        """Start the runs of the schedules' due windows (each window once, across engines)."""
        fired = await self.schedules.fire_due()
        if self.schedules.backlog:
            self.loop.note_backlog()
        return fired

    async def run_pending(self) -> int:
        """Execute pending runs, highest priority then oldest first."""
        limit = self._capacity()
        ids = await self.store.pending_run_ids(
            self.now(), limit, self.namespace, serves=self.serves
        )
        self.loop.note_batch(ids, limit)
        return await self._execute_all(ids)

    async def resume_due_timers(self) -> int:
        """Resume suspended runs whose wake time has come, most overdue first."""
        if self.where(Reason.TIMER) is Where.QUEUE and self.run_queue is not None:
            # Claim the due timers before handing them off, so other polls skip them.
            now = self.now()
            hold = now + timedelta(seconds=self.options.lease)
            runs = await self.store.hand_off_due_runs(
                now, self.options.timer_batch_size, self.namespace, hold, serves=self.serves
            )
            self.loop.note_batch(runs, self.options.timer_batch_size)
            self.run_queue.publish_timers(self._kept_here(runs))
            return len(runs)
        limit = min(self.options.timer_batch_size, self._capacity())
        now = self.now()
        ids = await self.store.due_run_ids(now, limit, self.namespace, serves=self.serves)
        self.loop.note_batch(ids, limit)
        if len(ids) >= _DENY_IN_ONE_WRITE:
            # Fallback retries of singleton waiters whose key is still full (thousands of them
            # behind one busy key) are denied in one write rather than a claim each.
            timers = {run_id: self.admission_retry() for run_id in ids}
            parked = set(await self.store.park_full_waiters(timers, now))
            ids = [run_id for run_id in ids if run_id not in parked]
        random.shuffle(ids)
        return await self._execute_all(ids)

    def _kept_here(self, handed: list[Run]) -> list[Run]:
        """The handed-off runs to publish: not those a local task of this instance is about to
        claim (a remote result it just landed, which this same poll found due before the task
        claimed it). Such a task claims it as the hand-off it now is, rather than find it not
        due and leave it to whichever instance takes the timer. A draining instance keeps
        none: its tasks take no further turn."""
        local = self._local
        if local is None or not self._accepting:
            return handed
        published = []
        for run in handed:
            if run.id in local.inflight:
                local.spawn(run.id, handoff=True)
            else:
                published.append(run)
        return published

    async def recover_incomplete(self) -> int:
        """Re-execute runs whose lease expired (their instance died mid-turn): in a fleet,
        through the run queue, so the recoveries spread over every instance like any start."""
        if self.where(Reason.RECOVERY) is Where.QUEUE and self.run_queue is not None:
            limit = self.options.timer_batch_size
            ids = await self.store.expired_run_ids(
                self.now(), limit, self.namespace, serves=self.serves
            )
            self.loop.note_batch(ids, limit)
            fresh = self._recovering.fresh(ids)
            self.send(fresh, Reason.RECOVERY)
            return len(fresh)
        limit = self._capacity()
        ids = await self.store.expired_run_ids(
            self.now(), limit, self.namespace, serves=self.serves
        )
        self.loop.note_batch(ids, limit)
        return await self._execute_all(ids)

    async def sweep_timeouts(self) -> int:
        """Cancel runs (and their subtrees) that exceeded their execution timeout."""
        ids = await self.store.timed_out_run_ids(
            self.now(), self.options.timer_batch_size, self.namespace, serves=self.serves
        )
        for run_id in ids:
            error = error_dict(
                ExecutionTimeoutError(f"run {run_id!r} exceeded its execution timeout"),
                with_traceback=False,
            )
            self.cancelled(await self.store.cancel_run(run_id, self.now(), error))
        return len(ids)

    def _capacity(self) -> int:
        return max(1, self.room())

    async def _execute_all(self, ids: Sequence[str]) -> int:
        # A polled run already executing here needs no second turn: the poll saw it mid-way.
        tasks = [self._spawn(run_id, poll=True) for run_id in ids]
        if self._in_loop():
            return len(tasks)
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)


class _SchedulerHost:
    """What the scheduler uses of the execution side (see ``schedules.SchedulerHost``)."""

    def __init__(self, execution: Execution, ready: Callable[[], Awaitable[None]]) -> None:
        self._execution = execution
        self._ready = ready

    @property
    def store(self) -> Store:
        return self._execution.store

    def now(self) -> datetime:
        return self._execution.now()

    async def ready(self) -> None:
        await self._ready()

    def workflow_definition(self, workflow: str) -> WorkflowDefinition:
        return self._execution.registry.workflow(workflow)

    def served_workflows(self) -> Collection[str]:
        return self._execution.registry.workflow_names

    async def gated_spec(
        self,
        definition: WorkflowDefinition,
        input: JSON,
        run_id: str,
        *,
        concurrency: Concurrency | None,
        priority: int,
        tags: Sequence[str],
        singleton: SingletonGate | None,
    ) -> RunSpec:
        lane: SingletonGate | Literal["workflow"] | None = (
            "workflow" if singleton is None else singleton
        )
        return await self._execution.specs.build(
            definition,
            input,
            run_id,
            concurrency=concurrency,
            priority=priority,
            tags=tags,
            lane=lane,
        )

    async def created(self, started: Sequence[Started]) -> None:
        for one in started:
            if one.run is not None:
                self._execution.count_starts(one.run.workflow, [one])
        ready = [s.run for s in started if s.created and not s.waiting and s.run is not None]
        if ready:
            self._execution.send_started(ready)

    def fire_grace(self) -> float:
        # A driving engine fires a window at most a poll late, and a busy pass later still:
        # windows later than this passed while nobody drove the schedule.
        return max(MISSED_AFTER, 2 * self._execution.options.poll_interval)


__all__ = ["Execution"]


def _log_failure(run: Run) -> None:
    """One line for a run that ended failed or dead (an operator's worker log shows it); the
    traceback is the run's, in the store, and at DEBUG here."""
    error = run.error or {}
    log.warning(
        "run %s (%s@%s) %s: %s: %s",
        run.id,
        run.workflow,
        run.version,
        run.status,
        error.get("type", "Error"),
        error.get("message", ""),
    )
    if error.get("traceback"):
        log.debug("run %s: %s", run.id, error["traceback"])
