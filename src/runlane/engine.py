"""Engine: start, signal, cancel and wait on runs, and drive them through the worker loop.

The engine is thin: admission happens in the store, replay in :mod:`runlane.turn`. What lives
here is the loop that finds due work (pending runs, due timers, expired leases, timeouts) and
the bookkeeping that executes each run on at most one local task at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence, Sized
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Literal, TypeVar

from . import admission
from .clock import Clock, SystemClock
from .concurrency import call_step_body
from .definitions import Concurrency, StepDefinition, WorkflowDefinition, as_seconds, check_tags
from .errors import (
    DefinitionError,
    ExecutionTimeoutError,
    RunExistsError,
    RunlaneError,
    RunNotFoundError,
    StepTimeoutError,
    StoreUnavailableError,
    UnknownStepError,
    UnsupportedStoreError,
    error_dict,
)
from .faults import OutageLog, is_infrastructure, unavailable
from .leases import LeaseKeeper
from .local import LocalRuns
from .models import (
    JSON,
    Claim,
    ClaimOutcome,
    Lease,
    RetryTimer,
    Run,
    RunSpec,
    RunStatus,
    Settlement,
    SingletonGate,
    Started,
    StepRecord,
    dead_settlement,
    ready_ids,
)
from .options import EngineOptions
from .queues import StepQueue
from .registry import Registry
from .remote import RemoteSteps
from .remote_turns import RemoteTurns, apply_decision
from .retention import CATCH_UP_PAUSE, Pruner, Retention
from .retention import older_than as older_than_cutoffs
from .runqueue import RunQueue
from .schedules import Schedule, Scheduler
from .serialization import normalise
from .stats import REFUSAL_REASONS, EngineStats
from .stores import open_store
from .stores.base import Store
from .tracing import Tracing
from .transports import open_transport
from .transports.base import Transport
from .turn import Turn, TurnOutcome
from .workflow_tasks import Decision

log = logging.getLogger("runlane.engine")

T = TypeVar("T")

MISSED_AFTER = 10.0
"""Seconds after which a schedule's window not fired yet counts as missed (see ``catchup``)."""

BACKLOG_POLL = 0.05
"""Seconds between the loop's passes while its polls keep finding full batches of due work."""

OUTAGE_BACKOFF_MAX = 5.0
"""Seconds between the loop's passes, at most, while the store is unreachable."""


class Engine:
    """Runs workflows durably against a store. Use ``async with engine:`` to drive it."""

    def __init__(
        self,
        store: Store | str | None = None,
        transport: Any = None,
        workflows: Iterable[Any] = (),
        steps: Iterable[Any] = (),
        clock: Clock | None = None,
        namespace: str | None = None,
        drive: bool = True,
        consumers: Literal["auto", "always", "never"] = "auto",
        schedules: Iterable[Schedule] = (),
        queues: Iterable[StepQueue] = (),
        remote_workflows: Iterable[WorkflowDefinition] = (),
        retention: Retention | None = None,
        tracer_provider: Any = None,
        **options: Any,
    ) -> None:
        if consumers not in ("auto", "always", "never"):
            raise ValueError("consumers must be 'auto', 'always' or 'never'")
        self.store: Store = open_store(store) if isinstance(store, str) or store is None else store
        self._owns_transport = isinstance(transport, str)
        self.transport: Transport | None = (
            open_transport(transport) if isinstance(transport, str) else transport
        )
        self.runqueue = (
            RunQueue(self, self.transport)
            if self.transport is not None and self.transport.has_run_queue
            else None
        )
        self.remote = RemoteSteps(self, self.transport) if self.transport is not None else None
        self.registry = Registry([*workflows, *remote_workflows], steps)
        self.remote_turns = (
            RemoteTurns(self, self.transport) if self.transport is not None else None
        )
        _check_remote_workflows(self.registry, self.transport)
        # Decisions claimed by the results consumer, by lease owner, for the turn that applies it.
        self._decisions: dict[str, Decision] = {}
        self._declared = _declared_schedules(schedules, self.registry)
        self.queues = _registered_queues(queues)
        self.schedules = Scheduler(_SchedulerHost(self))
        # A dead run of these starts a handler: the claim that finds it dead leaves it to us.
        self._dead_letters = self.registry.dead_letters
        self.clock: Clock = clock or SystemClock()
        self.namespace = namespace
        self.drive = drive
        self.consumers = consumers
        self.options = EngineOptions.from_kwargs(options)
        self.pruner = (
            Pruner(retention, self._prune_batch, self._prune_events, self.now)
            if retention is not None
            else None
        )
        self._prune_task: asyncio.Task[None] | None = None
        self.stats = EngineStats()
        self.tracing = Tracing(tracer_provider)
        self.outage = OutageLog(log, on_recovered=self._wake_loop)
        self.leases = LeaseKeeper(self.store, self.now, lambda: self.options.lease, self.outage)
        self.id = uuid.uuid4().hex[:12]
        self._tokens = itertools.count(1)
        self._local: LocalRuns | None = None
        # Futures of wait_for_run callers: the settled run when settled here, None otherwise.
        self._settled: dict[str, asyncio.Future[Run | None]] = {}
        self._wakeup: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._opened = False
        self._accepting = True
        self._next_wake: datetime | None = None
        self._backlog = False  # a poll of the last pass filled its batch: more work is due
        self._consuming = False

    # ---------------------------------------------------------------- lifecycle

    def now(self) -> datetime:
        return self.clock.now()

    async def _ready(self) -> None:
        if not self._opened:
            await self._api(self.store.open)
            if self.transport is not None:
                await self.transport.open()
            self._opened = True
            self._local = LocalRuns(
                self._execute, self._route, lambda: self._accepting, self.options.max_local_runs
            )
            self._wakeup = asyncio.Event()
            if self.queues:
                settings = [queue.settings() for queue in self.queues]
                await self._api(functools.partial(self.store.register_queues, settings, self.now()))
            for schedule in self._declared:
                await self._api(functools.partial(self.schedules.declare, schedule))

    async def __aenter__(self) -> Engine:
        await self._ready()
        self._accepting = True
        if self.drive and self._loop_task is None:
            self._loop_task = asyncio.create_task(self._loop(), name=f"runlane-engine-{self.id}")
        if self.consumers == "always" or (self.consumers == "auto" and self.drive):
            await self.start_consumers()
        return self

    async def start_consumers(self) -> None:
        """Consume the run queue, remote step results and heartbeats (if there is a transport)."""
        await self._ready()
        self._accepting = True
        self._consuming = True
        if self.runqueue is not None:
            self.runqueue.start_consuming()
        if self.remote is not None:
            self.remote.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.drain()
        if self.transport is not None and self._owns_transport:
            await self.transport.close()
        await self.store.close()
        self._opened = False

    async def drain(self, timeout: float = 10.0) -> None:
        """Stop taking new work and wait up to ``timeout`` seconds for turns in flight.

        The run-queue consumer stops first; runs it took but had not started go back to the
        queue; then the turns in flight finish (a turn still running at the timeout is cancelled
        and its lease expires, so another instance recovers it), and the wakes taken for those
        runs meanwhile go back too, now that another instance can claim them.
        """
        self._accepting = False
        self._consuming = False
        in_flight = set(self._local.inflight) if self._local is not None else set()
        if self.runqueue is not None:
            await self.runqueue.stop_consuming()
            await self.runqueue.hand_back(keep=in_flight)
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        if self._prune_task is not None:
            # A batch is one short statement: let it commit rather than roll it back.
            await asyncio.gather(self._prune_task, return_exceptions=True)
        if self._local is not None:
            await self._local.wait(timeout)
        if self.runqueue is not None:
            await self.runqueue.hand_back()
            await self.runqueue.flushed()
        if self.remote is not None:
            await self.remote.stop()
        await self.leases.stop()

    # ---------------------------------------------------------------- starting runs

    async def start(
        self,
        workflow: Any,
        input: JSON = None,
        run_id: str | None = None,
        *,
        concurrency: Concurrency | None = None,
        priority: int = 0,
        tags: Iterable[str] = (),
        if_exists: Literal["return", "fail"] = "return",
    ) -> Run:
        """Durably enqueue a pending run (idempotent by ``run_id``) and return it."""
        if if_exists not in ("return", "fail"):
            raise ValueError("if_exists must be 'return' or 'fail'")
        definition = self.registry.workflow(workflow)
        value = normalise(input, f"input of workflow {definition.name!r}")
        await self._ready()
        spec = await self.build_spec(
            definition,
            value,
            run_id or uuid.uuid4().hex,
            concurrency=concurrency,
            priority=priority,
            tags=check_tags(tags),
            debounce=True,
        )
        started, retried = await self._create(spec)
        self.count_starts(definition.name, [started])
        run = self._started(started)
        # After an outage, the run found may be the one this start's first write created.
        ours = retried and _same_start(run, spec)
        if not (started.created or started.debounced) and if_exists == "fail" and not ours:
            raise RunExistsError(run.id, run.status)
        if started.claim is not None and self._local is not None:
            self._local.spawn(run.id, claim=started.claim)
        elif (started.created or ours) and not started.waiting:
            self._kick_started([run])
        self._note_held([run])
        return run

    async def _create(self, spec: RunSpec) -> tuple[Started, bool]:
        """Create a start's run; after an outage, once more (the id makes it idempotent).
        Also says whether it was tried again."""
        # A run this instance will execute at once is claimed in the write that creates it.
        lease = None if self._outbound() is not None else self.successor_lease()
        try:
            [started] = await self.store.create_runs([spec], self.now(), lease=lease)
            return started, False
        except Exception as exc:
            if not is_infrastructure(exc):
                raise
        # The first write may have committed; if it leased the run to us, the turn is ours.
        [started] = await self._api(lambda: self.store.create_runs([spec], self.now()))
        run = started.run
        if lease is not None and run is not None and run.lease_owner == lease.owner:
            started = replace(started, claim=Claim(run, [], []))
        return started, True

    def count_starts(self, workflow: str, started: Iterable[Started]) -> None:
        for one in started:
            if one.rejected is not None:
                reason = REFUSAL_REASONS.get(type(one.rejected).__name__, "other")
                self.stats.refused(workflow, reason)
            elif one.created:
                self.stats.started(workflow)

    def _started(self, started: Started) -> Run:
        if started.rejected is not None:
            raise started.rejected
        assert started.run is not None
        return started.run

    async def build_spec(
        self,
        definition: WorkflowDefinition,
        input: JSON,
        run_id: str,
        *,
        parent: Run | None = None,
        concurrency: Concurrency | None = None,
        priority: int = 0,
        tags: Sequence[str] = (),
        lane: SingletonGate | Literal["workflow"] | None = "workflow",
        debounce: bool = False,
    ) -> RunSpec:
        """The spec of a new run, with its gates (singleton, quota, rate limit, and with
        ``debounce`` its debounce) evaluated on ``input``.

        ``lane`` replaces the workflow's singleton gate (a schedule's overlap lane). Only starts
        from outside a run are debounced (``start``, event subscribers): a child's or a
        schedule window's run id must name a run of its own."""
        if not isinstance(run_id, str) or not run_id:
            raise ValueError("run_id must be a non-empty string")
        singleton = admission.singleton_gate(definition, input) if lane == "workflow" else lane
        quota = await admission.quota_gate(concurrency or definition.concurrency, input)
        rate = admission.rate_gate(definition, input)
        folded = admission.debounce_gate(definition, input) if debounce else None
        if (singleton or quota or rate or folded) and not self.store.atomic_admission:
            raise UnsupportedStoreError(
                f"{type(self.store).__name__} cannot admit gated or limited runs atomically"
            )
        now = self.now()
        timeout = definition.execution_timeout
        return RunSpec(
            id=run_id,
            workflow=definition.name,
            version=definition.version,
            input=input,
            created_at=now,
            tags=tuple(
                dict.fromkeys((*definition.tags, *tags, *admission.lane_tags(singleton, quota)))
            ),
            parent_id=parent.id if parent else None,
            namespace=parent.namespace if parent else self.namespace,
            priority=parent.priority if parent and not priority else priority,
            deadline_at=now + timedelta(seconds=timeout) if timeout is not None else None,
            singleton=singleton,
            quota=quota,
            rate=rate,
            debounce=folded,
        )

    async def child_spec(self, workflow: Any, input: JSON, run_id: str, parent: Run) -> RunSpec:
        return await self.build_spec(self.registry.workflow(workflow), input, run_id, parent=parent)

    async def continuation_spec(self, run: Run, input: JSON) -> RunSpec:
        next_id = continuation_id(run.id)
        definition = self.registry.workflow(run.workflow)
        # The new input may name other lanes: the run's own lane tags do not carry over.
        inherited = (*definition.tags, *admission.run_lane_tags(run))
        user_tags = tuple(t for t in run.tags if t not in inherited)
        return await self.build_spec(
            definition, input, next_id, priority=run.priority, tags=user_tags
        )

    async def handler_spec(self, workflow: str, run: Run, settlement: Settlement) -> RunSpec:
        """The start of ``workflow`` as the failure handler of ``run`` settling so: its input
        says which run ended how, its id counts the run's failures (``failure_id``), and its
        gates are evaluated as any start's."""
        value = {
            "run_id": run.id,
            "workflow": run.workflow,
            "input": run.input,
            "error": settlement.error,
            "status": str(settlement.status),
        }
        definition = self.registry.workflow(workflow)
        value = normalise(value, f"input of failure handler {workflow!r}")
        spec = await self.build_spec(definition, value, failure_id(run), priority=run.priority)
        return replace(spec, namespace=run.namespace)

    async def signal(self, run_id: str, name: str, payload: JSON = None) -> None:
        """Deliver a signal to the run's waiter, or buffer it until the run waits for it."""
        value = normalise(payload, f"payload of signal {name!r}")
        await self._ready()
        if await self._api(lambda: self.store.deliver_signal(run_id, name, value, self.now())):
            self._kick([run_id])

    async def signal_with_start(
        self,
        workflow: Any,
        input: JSON,
        run_id: str,
        signal: str,
        payload: JSON = None,
        **start_opts: Any,
    ) -> Run:
        """Start (idempotently) then signal; the start passes through every gate as usual."""
        normalise(payload, f"payload of signal {signal!r}")
        run = await self.start(workflow, input, run_id, **start_opts)
        await self.signal(run.id, signal, payload)
        return run

    async def publish_event(self, name: str, payload: JSON = None, *, id: str | None = None) -> int:
        """Resume ``wait_for_event`` waiters and start ``on_event`` subscribers; idempotent by id."""
        value = normalise(payload, f"payload of event {name!r}")
        await self._ready()
        event, created, woken = await self._api(
            lambda: self.store.publish_event(name, value, id, self.now())
        )
        specs = []
        for definition in self.registry.subscribers(name):
            run_id = f"{definition.name}:event:{event.id or event.seq}"
            try:
                specs.append(await self.build_spec(definition, value, run_id, debounce=True))
            except RunlaneError:
                log.exception("event %s: could not start subscriber %s", name, definition.name)
        # Subscriber ids are deterministic: a retry after an outage creates each run once.
        started = await self._api(lambda: self.store.create_runs(specs, self.now()), retry=True)
        for result, spec in zip(started, specs, strict=True):
            if result.rejected is not None:
                log.warning(
                    "event %s: subscriber %s skipped: %s", name, spec.workflow, result.rejected
                )
        # A subscriber start folded into a debounced run touched that run all the same.
        new = [s.run for s in started if (s.created or s.debounced) and s.run is not None]
        self._kick([*woken, *ready_ids(started)])
        self._note_held(new)
        return len(woken) + len(new) if created or new else 0

    async def cancel(self, run_id: str) -> bool:
        """Cancel a run and its children; False when there was nothing to cancel."""
        await self._ready()
        try:
            changed = await self._api(lambda: self.store.cancel_run(run_id, self.now(), None))
        except RunNotFoundError:
            return False
        self._notify_many(changed)
        return bool(changed)

    async def requeue(self, run_id: str) -> Run:
        """Retry a failed, dead or cancelled run from its checkpoints.

        A requeue is a start as far as the gates go: over its quota it raises
        ``ConcurrencyLimitError``, behind a full singleton backlog ``SingletonQueueFullError``,
        and nothing changes.
        """
        await self._ready()
        run = await self._api(lambda: self.store.get_run(run_id), retry=True)
        if run is None:
            raise RunNotFoundError(run_id)
        definition = self.registry.workflow(run.workflow, run.version)
        deadline = None
        if definition.execution_timeout is not None:
            deadline = self.now() + timedelta(seconds=definition.execution_timeout)
        quota, singleton = await admission.requeue_gates(definition, run)
        requeued = await self._api(
            lambda: self.store.requeue_run(
                run_id, self.now(), deadline, quota=quota, singleton=singleton
            )
        )
        self._settled.pop(run_id, None)
        self._kick([run_id])
        return requeued

    # ---------------------------------------------------------------- reads

    async def get_run(self, run_id: str) -> Run | None:
        await self._ready()
        return await self._api(lambda: self.store.get_run(run_id), retry=True)

    async def list_runs(
        self,
        *,
        workflow: Any = None,
        status: RunStatus | str | None = None,
        tag: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Run]:
        await self._ready()
        name = (
            None
            if workflow is None
            else self.registry.workflow(workflow).name
            if not isinstance(workflow, str)
            else workflow
        )
        wanted = RunStatus(status) if status is not None else None
        return await self._api(
            lambda: self.store.list_runs(
                workflow=name, status=wanted, tag=tag, limit=limit, offset=offset
            ),
            retry=True,
        )

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        await self._ready()
        return await self._api(lambda: self.store.list_steps(run_id), retry=True)

    async def read(self, query: Callable[[Store], Awaitable[T]]) -> T:
        """``query`` on the store, as the API's own reads run: after one failed try on a fresh
        connection, ``StoreUnavailableError``. For views (the HTTP API, the command line)
        that read more than runs and steps."""
        await self._ready()
        return await self._api(lambda: query(self.store), retry=True)

    async def _api(self, call: Callable[[], Awaitable[T]], *, retry: bool = False) -> T:
        """An API call's store work. An outage raises ``StoreUnavailableError``; with ``retry``
        (reads, idempotent writes) only after one more try, which gets a fresh connection (the
        store has dropped the dead one by then)."""
        for last in (not retry, True):
            try:
                result = await call()
                if self.outage.down:
                    self.outage.succeeded()
                return result
            except StoreUnavailableError:
                if last:
                    raise
            except Exception as exc:
                if not is_infrastructure(exc):
                    raise
                if last:
                    raise unavailable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def wait_for_run(self, run_id: str, timeout: float | None = None) -> Run:
        """Return once the run is terminal; ``TimeoutError`` after ``timeout`` wall-clock seconds."""
        await self._ready()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Listen before reading, so a settle landing between the two is not missed.
            waiter = self._settled.get(run_id)
            if waiter is None or waiter.done():
                waiter = self._settled[run_id] = asyncio.get_running_loop().create_future()
            if self._executing(run_id):
                # A turn of it runs here: its settlement will come to the waiter without a read.
                settled = await self._wait_settled(waiter, deadline)
                if settled is not None:
                    return settled
            run = await self._read_through_outage(run_id, deadline)
            if run is None or run.is_terminal:
                self._settled.pop(run_id, None)  # nobody else may be listening; don't keep it
            if run is None:
                raise RunNotFoundError(run_id)
            if run.is_terminal:
                return run
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self._settled.pop(run_id, None)
                raise TimeoutError(f"run {run_id!r} is still {run.status} after {timeout}s")
            settled = await self._wait_settled(waiter, deadline)
            if settled is not None:
                return settled

    def _executing(self, run_id: str) -> bool:
        return self._local is not None and run_id in self._local.inflight

    async def _wait_settled(
        self, waiter: asyncio.Future[Run | None], deadline: float | None
    ) -> Run | None:
        """The run if it settles here within the next poll slice (0.25 s), else None."""
        left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
        if left <= 0:
            return None
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(waiter), left)
        return None

    async def _read_through_outage(self, run_id: str, deadline: float | None) -> Run | None:
        """Read a run, retrying with backoff while the store is unreachable (until the deadline,
        where the outage raises ``StoreUnavailableError``)."""
        pause = 0.05
        while True:
            try:
                run = await self.store.get_run(run_id)
                self.outage.succeeded()
                return run
            except Exception as exc:
                if not is_infrastructure(exc):
                    raise
                if deadline is not None and time.monotonic() + pause > deadline:
                    if isinstance(exc, StoreUnavailableError):
                        raise
                    raise unavailable(exc) from exc
                self.outage.failed(exc, f"waiting for run {run_id}")
                await asyncio.sleep(pause)
                pause = min(1.0, pause * 2)

    def _notify_many(self, run_ids: Iterable[str], settled: Run | None = None) -> None:
        for run_id in run_ids:
            waiter = self._settled.pop(run_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(settled)

    # ---------------------------------------------------------------- the loop phases

    async def tick(self) -> int:
        """One pass of every phase, executing what is due by the engine clock; returns turns run."""
        await self._ready()
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
        if self.drive and self._loop_task is not None and asyncio.current_task() is self._loop_task:
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

    async def _prune_batch(self, cutoffs: dict[RunStatus, datetime], limit: int) -> list[str]:
        return await self.store.prune_runs(cutoffs, limit)

    async def _prune_events(self, before: datetime, limit: int) -> int:
        return await self.store.prune_events(before, limit)

    async def prune(
        self, older_than: float | timedelta, *, batch: int = 1000, events: bool = True
    ) -> int:
        """Delete every settled run (any terminal status) last updated more than
        ``older_than`` ago, in batches of ``batch``; returns how many were deleted. A parent
        whose children are still active is kept (``runlane runs prune --older-than``).
        With ``events``, the published events older than that go too (:meth:`prune_events`)."""
        await self._ready()
        cutoffs = older_than_cutoffs(older_than, self.now())
        deleted = 0
        while True:
            gone = await self._api(functools.partial(self.store.prune_runs, cutoffs, batch))
            deleted += len(gone)
            if len(gone) < batch:
                break
        if events:
            await self.prune_events(older_than, batch=batch)
        return deleted

    async def prune_events(self, older_than: float | timedelta, *, batch: int = 1000) -> int:
        """Delete the published events older than ``older_than`` (the newest one excepted), in
        batches of ``batch``; returns how many were deleted."""
        await self._ready()
        before = self.now() - timedelta(seconds=as_seconds(older_than))
        deleted = 0
        while True:
            gone = await self._api(functools.partial(self.store.prune_events, before, batch))
            deleted += gone
            if gone < batch:
                return deleted

    async def fire_schedules(self) -> int:
        """Start the runs of the schedules' due windows (each window once, across engines)."""
        await self._ready()
        fired = await self.schedules.fire_due()
        if self.schedules.backlog:
            self._backlog = True
        return fired

    async def run_pending(self) -> int:
        """Execute pending runs, highest priority then oldest first."""
        await self._ready()
        limit = self._capacity()
        ids = await self.store.pending_run_ids(self.now(), limit, self.namespace)
        self._note_batch(ids, limit)
        return await self._execute_all(ids)

    async def resume_due_timers(self) -> int:
        """Resume suspended runs whose wake time has come, most overdue first."""
        await self._ready()
        if self._queued and self.runqueue is not None:
            # Claim the due timers before handing them off, so other polls skip them.
            now = self.now()
            hold = now + timedelta(seconds=self.options.lease)
            runs = await self.store.hand_off_due_runs(
                now, self.options.timer_batch_size, self.namespace, hold
            )
            self._note_batch(runs, self.options.timer_batch_size)
            self.runqueue.publish_timers(runs)
            return len(runs)
        limit = min(self.options.timer_batch_size, self._capacity())
        ids = await self.store.due_run_ids(self.now(), limit, self.namespace)
        self._note_batch(ids, limit)
        random.shuffle(ids)
        return await self._execute_all(ids)

    async def recover_incomplete(self) -> int:
        """Re-execute runs whose lease expired (their instance died mid-turn)."""
        await self._ready()
        limit = self._capacity()
        ids = await self.store.expired_run_ids(self.now(), limit, self.namespace)
        self._note_batch(ids, limit)
        return await self._execute_all(ids)

    async def sweep_timeouts(self) -> int:
        """Cancel runs (and their subtrees) that exceeded their execution timeout."""
        await self._ready()
        ids = await self.store.timed_out_run_ids(
            self.now(), self.options.timer_batch_size, self.namespace
        )
        for run_id in ids:
            error = error_dict(
                ExecutionTimeoutError(f"run {run_id!r} exceeded its execution timeout"),
                with_traceback=False,
            )
            self._notify_many(await self.store.cancel_run(run_id, self.now(), error))
        return len(ids)

    def _capacity(self) -> int:
        return max(1, self.local_room())

    def _note_batch(self, found: Sized, limit: int) -> None:
        """A poll that filled its batch left more due work behind: the loop comes back soon."""
        if len(found) >= limit:
            self._backlog = True

    async def _execute_all(self, ids: Sequence[str]) -> int:
        # A polled run already executing here needs no second turn: the poll saw it mid-way.
        tasks = [self._spawn(run_id, poll=True) for run_id in ids]
        if self.drive and self._loop_task is not None and asyncio.current_task() is self._loop_task:
            return len(tasks)
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    @property
    def _queued(self) -> bool:
        """Whether starts and wakes travel through the run queue rather than run here."""
        return self.runqueue is not None and self._consuming

    def _outbound(self) -> RunQueue | None:
        """The run queue new starts and wakes go to (a consumer, or a pure producer), if any."""
        return self.runqueue if self._consuming or not self.drive else None

    def _driving(self) -> bool:
        return self._accepting and (self._loop_task is not None or self._consuming)

    def _kick_started(self, runs: Sequence[Run]) -> None:
        queue = self._outbound()
        if queue is not None:
            # A producer (or any instance of a fleet) hands starts to whoever consumes.
            queue.publish_starts(runs)
        elif self._driving():
            self.run_locally(r.id for r in runs)

    def _kick(self, run_ids: Iterable[str]) -> None:
        """Wake these runs: through the run queue, or here when this engine drives alone."""
        ids = list(run_ids)
        if not ids:
            return
        queue = self._outbound()
        if queue is not None:
            queue.publish_wakes(ids)
        elif self._driving():
            self.run_locally(ids)

    def wake(self, run_ids: Iterable[str]) -> None:
        """Make runs that were just woken in the store execute soon (here or via the queue)."""
        self._kick(run_ids)

    def resume_here(self, run_ids: Iterable[str]) -> None:
        """Runs this instance just made due (a remote result it recorded): execute them here when
        it drives and has room, else wake them like any other."""
        if self._driving() and self.local_room() > 0:
            self.run_locally(run_ids)
        else:
            self._kick(run_ids)

    def run_locally(self, run_ids: Iterable[str]) -> None:
        if self._driving() and self._local is not None:
            self._local.spawn_all(run_ids)

    def run_from_queue(self, run_id: str, *, handoff: bool) -> None:
        self._spawn(run_id, handoff=handoff)

    def local_room(self) -> int:
        return self._local.room() if self._local is not None else 0

    async def room_freed(self) -> None:
        assert self._local is not None
        await self._local.room_freed()

    def _spawn(
        self, run_id: str, *, handoff: bool = False, poll: bool = False
    ) -> asyncio.Task[None]:
        assert self._local is not None
        return self._local.spawn(run_id, handoff=handoff, poll=poll)

    def _route(self, woken: list[str]) -> bool:
        if self._queued:
            self._kick(woken)
            return True
        return False

    async def _execute(
        self, run_id: str, handoff: bool = False, claim: Claim | None = None
    ) -> list[str]:
        """Claim the run (or use ``claim``) and drive one turn; returns runs to execute next."""
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
                return []
            if outcome.dying:
                verdict = dead_settlement(claim.run.recoveries, self.options.max_recovery_attempts)
            if outcome.handed_off_at is not None:
                released = (self.now() - outcome.handed_off_at).total_seconds()
        definition = self.registry.workflow(claim.run.workflow, claim.run.version)
        owner = claim.run.lease_owner or ""
        self.stats.turn_began(run_id, claim.run.workflow, released)
        run = claim.run
        with self.tracing.turn(run.id, run.workflow, run.recoveries + 1):
            result = await self._drive(claim, owner, definition, verdict)
        if result.outage is not None:
            self.outage.failed(result.outage, f"executing run {run_id}")
        elif self.outage.down:
            self.outage.succeeded()
        if result.state == "settled":
            self._count_settled(claim.run, result)
        if result.successor is not None and self._local is not None:
            self._local.spawn(result.successor.run.id, claim=result.successor)
        if result.state == "settled":
            self._notify_many([run_id], result.settled)
        elif result.state == "rewake":
            return [run_id]
        elif result.wake_at is not None:
            self._note_wake(result.wake_at)
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
        freed = list(result.woken)
        if result.successor is not None:
            freed.append(result.successor.run.id)
        self.stats.slot_freed(freed)

    async def apply_decision(self, decision: Decision) -> None:
        """Lease the run for a worker's decision, if it still awaits that turn, and apply it on
        a local task; a decision for a turn no longer awaited is dropped."""
        now = self.now()
        owner = f"{self.id}:{next(self._tokens)}"
        lease_until = now + timedelta(seconds=self.options.lease)
        claim = await self.store.claim_decision(
            decision.run_id, decision.task_id, owner, now, lease_until
        )
        if claim is None:
            log.debug("run %s: decision %s dropped", decision.run_id, decision.task_id)
            return
        self._decisions[owner] = decision
        assert self._local is not None
        self._local.spawn(decision.run_id, claim=claim)

    async def _claim(self, run_id: str, handoff: bool) -> ClaimOutcome:
        if self.runqueue is not None and not self.runqueue.claiming(run_id):
            return ClaimOutcome()
        now = self.now()
        outcome = await self.store.claim_run(
            run_id,
            f"{self.id}:{next(self._tokens)}",
            now,
            now + timedelta(seconds=self.options.lease),
            singleton_retry=self.admission_retry(),
            max_recoveries=self.options.max_recovery_attempts,
            handoff=handoff,
            dead_letters=self._dead_letters,
        )
        if outcome.settled is not None:
            self._notify_many([run_id], outcome.settled)
        return outcome

    def admission_retry(self) -> RetryTimer:
        """The fallback timer of a denied admission (a singleton waiter's, a queued step's),
        jittered for each denial so waiters parked together do not all come back together."""
        return RetryTimer(
            self.options.singleton_retry, self.options.lease, random.uniform(0.75, 1.25)
        )

    def successor_lease(self) -> Lease | None:
        """A lease for a run this engine can execute at once: a singleton waiter a settlement
        here hands its slot to, or a run it starts (None: don't)."""
        if not self._driving() or self.local_room() <= 0:
            return None
        until = self.now() + timedelta(seconds=self.options.lease)
        return Lease(f"{self.id}:{next(self._tokens)}", until)

    def poll_soon(self) -> None:
        """Look for due work now rather than at the next poll interval."""
        self._wake_loop()

    def _wake_loop(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _note_held(self, runs: Iterable[Run]) -> None:
        """Runs held by a throttle or a debounce begin by their timer: the loop comes back then."""
        now = self.now()
        for run in runs:
            if run.held(now) and run.wake_at is not None:
                self._note_wake(run.wake_at)

    def _note_wake(self, when: datetime) -> None:
        if self._next_wake is None or when < self._next_wake:
            self._next_wake = when
            if self._wakeup is not None:
                self._wakeup.set()

    async def _loop(self) -> None:
        assert self._wakeup is not None
        last_error = 0.0
        backoff = 0.0
        while self._accepting:
            self._wakeup.clear()
            self._backlog = False
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_infrastructure(exc):
                    # Back off while the store is unreachable: wakes would only fail again.
                    self.outage.failed(exc, "polling for due work")
                    backoff = min(OUTAGE_BACKOFF_MAX, max(self.options.poll_interval, backoff * 2))
                    # Woken early when another call finds the store back.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), backoff)
                    continue
                if time.monotonic() - last_error > 60:
                    log.exception("engine loop pass failed; retrying")
                    last_error = time.monotonic()
            else:
                backoff = 0.0
                self.outage.succeeded()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self._poll_delay())

    def _poll_delay(self) -> float:
        delay = self.options.poll_interval
        if self._backlog:
            # Due work is waiting (a burst of timers, a backlog of starts): the next pass
            # comes once the batch just spawned has had a moment, not a whole interval later.
            delay = min(delay, BACKLOG_POLL)
        if self._next_wake is not None:
            until = (self._next_wake - self.now()).total_seconds()
            if until <= delay:
                self._next_wake = None
                delay = max(0.0, until)
        return delay

    # ---------------------------------------------------------------- steps

    def resolve_step(
        self, fn_or_name: Callable[..., Any] | str, group: str | None
    ) -> StepDefinition:
        return self.registry.step(fn_or_name, group)

    async def call_step(self, definition: StepDefinition, input: JSON) -> JSON:
        fn = definition.fn
        if fn is None:
            raise UnknownStepError(definition.name)
        call = call_step_body(fn, input)
        if definition.timeout is None:
            return await call
        try:
            return await asyncio.wait_for(call, definition.timeout)
        except TimeoutError:
            raise StepTimeoutError(
                f"step {definition.name!r} did not finish within {definition.timeout}s"
            ) from None


class _SchedulerHost:
    """What the scheduler uses of its engine (see ``schedules.SchedulerHost``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def store(self) -> Store:
        return self._engine.store

    def now(self) -> datetime:
        return self._engine.now()

    async def ready(self) -> None:
        await self._engine._ready()

    def workflow_definition(self, workflow: str) -> WorkflowDefinition:
        return self._engine.registry.workflow(workflow)

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
        return await self._engine.build_spec(
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
                self._engine.count_starts(one.run.workflow, [one])
        ready = [s.run for s in started if s.created and not s.waiting and s.run is not None]
        if ready:
            self._engine._kick_started(ready)

    def fire_grace(self) -> float:
        # A driving engine fires a window at most a poll late, and a busy pass later still:
        # windows later than this passed while nobody drove the schedule.
        return max(MISSED_AFTER, 2 * self._engine.options.poll_interval)


def _check_remote_workflows(registry: Registry, transport: Transport | None) -> None:
    remote = [d.name for d in registry.workflows if d.group is not None]
    if remote and transport is None:
        raise DefinitionError(
            f"workflow {remote[0]!r} is remote (it has a group); its turns need a transport"
        )


def _registered_queues(queues: Iterable[StepQueue]) -> list[StepQueue]:
    registered: dict[str, StepQueue] = {}
    for queue in queues:
        if not isinstance(queue, StepQueue):
            raise DefinitionError(f"queues= takes StepQueue objects, not {queue!r}")
        if queue.name in registered and registered[queue.name] != queue:
            raise DefinitionError(f"step queue {queue.name!r} is registered twice, differently")
        registered[queue.name] = queue
    return list(registered.values())


def _declared_schedules(schedules: Iterable[Schedule], registry: Registry) -> list[Schedule]:
    declared = list(schedules)
    for schedule in declared:
        if not isinstance(schedule, Schedule):
            raise DefinitionError(f"schedules= takes Schedule objects, not {schedule!r}")
        registry.workflow(schedule.workflow)  # UnknownWorkflowError before anything is written
    return declared


def _same_start(run: Run, spec: RunSpec) -> bool:
    """Whether an existing run is the one a start's first (outage-cut) write created."""
    return (
        run.created_at == spec.created_at
        and run.workflow == spec.workflow
        and run.status in (RunStatus.PENDING, RunStatus.BLOCKED)
    )


def failure_id(run: Run) -> str:
    """``<id>.failure.<n>``: the failure handler run of the run's n-th failure (from 1)."""
    return f"{run.id}.failure.{run.failures + 1}"


def continuation_id(run_id: str) -> str:
    """``<id>~1`` for a first continuation, then ``~2``, ``~3``, ..."""
    base, _, n = run_id.rpartition("~")
    return f"{base}~{int(n) + 1}" if base and n.isdigit() else f"{run_id}~1"


__all__ = ["Engine", "RunStatus", "continuation_id", "failure_id"]
