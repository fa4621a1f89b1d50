"""Engine: the public face of runlane. Start, signal, cancel and wait on runs; read them.

The engine is a facade: what users call (the public API's contract) lives here, and everything
else is delegated. Executing runs (claim -> turn -> outcome, where due runs go, the loop and
its phases) is :class:`~runlane.execution.Execution`; the specs of new runs are
:class:`~runlane.specs.RunSpecs`; admission happens in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Literal, TypeVar, Unpack, cast

from . import admission
from .attributes import AttributeValue, check_attributes
from .clock import Clock, SystemClock
from .codecs import Codec
from .definitions import (
    Concurrency,
    WorkflowDefinition,
    as_seconds,
    check_version,
)
from .errors import (
    ConfigurationError,
    DefinitionError,
    RunExistsError,
    RunFinishedError,
    RunlaneError,
    RunNotFoundError,
    StoreUnavailableError,
    UpdateRejectedError,
)
from .execution import Execution
from .faults import is_infrastructure, unavailable
from .forks import fork_id, fork_point, forked_records
from .models import (
    JSON,
    EngineInfo,
    Run,
    RunStatus,
    Serves,
    StepKind,
    StepRecord,
    ready_ids,
)
from .namespaces import fenced, sees
from .options import EngineKnobs, EngineOptions
from .payloads import Payloads
from .presence import judged
from .registry import Registry
from .retention import Pruner, Retention
from .retention import older_than as older_than_cutoffs
from .schedules import Schedule, Scheduler
from .serialization import normalise
from .starts import Start, StartOutcome, Starts
from .stats import EngineStats
from .step_queues import StepQueue
from .stores import open_store
from .stores.base import Reads, Store
from .stores.encoded import EncodedStore, unwrapped
from .tracing import Tracing
from .transports import open_transport
from .transports.base import Transport
from .transports.encoded import encoded_transport
from .updates import delivered, new_update, signal_name

log = logging.getLogger(__name__)

T = TypeVar("T")


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
        scope_reads: bool = False,
        drive: bool = True,
        consumers: Literal["auto", "always", "never"] = "auto",
        schedules: Iterable[Schedule] = (),
        queues: Iterable[StepQueue] = (),
        remote_workflows: Iterable[WorkflowDefinition] = (),
        retention: Retention | None = None,
        tracer_provider: Any = None,
        codec: Codec | None = None,
        **options: Unpack[EngineKnobs],
    ) -> None:
        if consumers not in ("auto", "always", "never"):
            raise ConfigurationError("consumers must be 'auto', 'always' or 'never'")
        self._scope = _scope(namespace, scope_reads)
        self._payloads = Payloads(codec)
        opened: Store = open_store(store) if isinstance(store, str) or store is None else store
        self._owns_transport = isinstance(transport, str)
        self.transport: Transport | None = (
            open_transport(transport) if isinstance(transport, str) else transport
        )
        registry = Registry([*workflows, *remote_workflows], steps)
        _check_remote_workflows(registry, self.transport)
        self._declared = _declared_schedules(schedules, registry)
        self._queues = _registered_queues(queues)
        self.clock: Clock = clock or SystemClock()
        self.consumers = consumers
        engine_options = EngineOptions.from_kwargs(options)
        self.pruner = (
            Pruner(retention, self._prune_batch, self._prune_events, self.now)
            if retention is not None
            else None
        )
        self._execution = Execution(
            engine_id=uuid.uuid4().hex[:12],
            store=self._through_codec(opened),
            transport=encoded_transport(self.transport, self._payloads),
            registry=registry,
            options=engine_options,
            clock=self.clock,
            namespace=namespace,
            drive=drive,
            has_queues=bool(self._queues),
            pruner=self.pruner,
            tracing=Tracing(tracer_provider),
            ready=self._ready,
            payloads=self._payloads,
        )
        # A scoped engine's new runs get keys of its namespace's own (admission.scoped_key).
        self._execution.specs.scope = self._scope
        self.schedules: Scheduler = self._execution.schedules
        self._starts = Starts(self._execution, self._scope, self._api, self._ready)
        self._opened = False

    # ---------------------------------------------------------------- what it is

    @property
    def store(self) -> Store:
        """The store as this engine sees it: with a codec, its payloads decoded (the store
        itself is ``runlane.stores.encoded.unwrapped(engine.store)``)."""
        return self._execution.store

    @store.setter
    def store(self, store: Store) -> None:
        self._execution.store = self._through_codec(store)

    @property
    def codec(self) -> Codec | None:
        """What encodes this engine's payloads at rest and on the wire (None: kept in clear)."""
        return self._payloads.codec

    def _through_codec(self, store: Store) -> Store:
        if self._payloads.codec is None:
            return store
        return cast(Store, EncodedStore(unwrapped(store), self._payloads))

    @property
    def registry(self) -> Registry:
        """The workflows (by name and version) and steps this engine knows."""
        return self._execution.registry

    @registry.setter
    def registry(self, registry: Registry) -> None:
        self._execution.registry = registry

    @property
    def drive(self) -> bool:
        """Whether ``async with`` starts the background loop (else: ``tick()``)."""
        return self._execution.drive

    @drive.setter
    def drive(self, drive: bool) -> None:
        self._execution.drive = drive

    @property
    def namespace(self) -> str | None:
        return self._execution.namespace

    @property
    def scope_reads(self) -> bool:
        """Whether the engine's reads, admission and operations are fenced to its namespace."""
        return self._scope is not None

    @property
    def _reads(self) -> Reads:
        """The store's reads as this engine sees them: its namespace's runs only when scoped."""
        return fenced(self.store, self._scope)

    @property
    def _view(self) -> Reads:
        """The reads of a view (``read``): as ``_reads``, but a payload that does not decode is
        left as stored (a view shows it as ``"encrypted"``) rather than raised."""
        store = self.store
        lenient = store.lenient() if isinstance(store, EncodedStore) else store
        return fenced(lenient, self._scope)

    @property
    def options(self) -> EngineOptions:
        return self._execution.options

    @property
    def stats(self) -> EngineStats:
        """What the engine counted (starts, refusals, settlements, step durations)."""
        return self._execution.stats

    @property
    def id(self) -> str:
        """This instance's id: its leases' owners begin with it."""
        return self._execution.id

    def now(self) -> datetime:
        return self.clock.now()

    # ---------------------------------------------------------------- lifecycle

    async def _ready(self) -> None:
        if not self._opened:
            await self._api(self.store.open)
            if self.transport is not None:
                await self.transport.open()
            self._opened = True
            self._execution.open()
            if self._queues:
                settings = [queue.settings() for queue in self._queues]
                await self._api(functools.partial(self.store.register_queues, settings, self.now()))
            elif self.drive:
                # Queues other engines registered: a remote result this one records may free a
                # slot, and the waiters it wakes should not wait for the next poll here.
                registered = await self._api(self.store.queue_views)
                self._execution.has_queues = bool(registered)
            for schedule in self._declared:
                await self._api(functools.partial(self.schedules.declare, schedule))
            if self.options.announce:
                await self._announce()

    async def _announce(self) -> None:
        """This engine's record in the store: a pure producer (no loop, no consumers) serves
        nothing, since it claims nothing."""
        execution = self._execution
        producer = not self.drive and self.consumers == "never"
        serves = Serves(frozenset()) if producer else execution.serves
        await self._api(
            lambda: execution.presence.announce(serves, execution.groups(), self.namespace)
        )

    async def __aenter__(self) -> Engine:
        await self._ready()
        self._execution.start_loop()
        if self.consumers == "always" or (self.consumers == "auto" and self.drive):
            await self.start_consumers()
        return self

    async def start_consumers(self) -> None:
        """Consume the run queue, remote step results and heartbeats (if there is a transport)."""
        await self._ready()
        self._execution.start_consumers()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.drain()
        await self._execution.presence.withdraw()
        if self.transport is not None and self._owns_transport:
            await self.transport.close()
        await self.store.close()
        self._opened = False

    async def drain(self, timeout: float = 10.0) -> None:
        """Stop taking new work and wait up to ``timeout`` seconds for turns in flight (a turn
        still running then is cancelled, and its lease expires for another instance)."""
        await self._execution.drain(timeout)

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
        version: str | None = None,
        execution_timeout: float | timedelta | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> Run:
        """Durably enqueue a pending run (idempotent by ``run_id``) and return it.

        The run is of the latest version of ``workflow`` this engine registered, or of
        ``version``; it keeps that version for life. ``execution_timeout`` (seconds) replaces
        the workflow's for this run: not finished by then, it is cancelled with its children,
        its error an ``ExecutionTimeoutError``. ``attributes`` (names to ``str``, ``int``,
        ``float`` or ``bool``) index it for ``list_runs(attributes=...)``; anything else raises
        ``SerializationError`` before anything is written. A start that finds its run id
        existing returns that run as it is, attributes included."""
        return await self._starts.one(
            workflow, input, run_id, concurrency, priority, tags, if_exists, version,
            execution_timeout, attributes,
        )  # fmt: skip

    async def start_many(self, starts: Iterable[Start]) -> list[StartOutcome]:
        """Start many runs in one store round trip (PostgreSQL) or transaction (SQLite), one
        :class:`~runlane.StartOutcome` per :class:`~runlane.Start`, in order.

        Each start is admitted exactly as ``start`` would admit it, in the batch's order: a
        singleton's line and backlog, a quota, a rate limit, a debounce, an existing id
        (``if_exists``), the namespace. A refused or invalid start is its outcome's ``error``
        (what ``start`` would have raised) and leaves the others alone; ``outcome.result()``
        returns the run or raises it. Runs of one key line up in the batch's order. An outage
        the write meets after one more try raises ``StoreUnavailableError`` for the whole
        call; trying the same starts again (with their run ids) is then safe."""
        return await self._starts.many(starts)

    async def fork(
        self,
        source: str,
        /,
        *,
        from_seq: int | None = None,
        run_id: str | None = None,
        input: JSON = None,
        version: str | None = None,
    ) -> Run:
        """Start a new run of ``source``'s workflow from ``source``'s recorded operations.

        Its history is the original's settled records before ``from_seq`` (by default its
        first failed or unfinished one): their results are reused, never executed again, and
        execution goes on from ``from_seq``. The original is untouched. The fork is of the
        latest version of the workflow this engine registered (or ``version``), with the
        original's input (or ``input``) and its attributes as they are, admitted like a start:
        a singleton's line, a quota (``ConcurrencyLimitError``), a rate limit. It records
        ``forked_from = (source, from_seq)``; its id is ``run_id``, by default
        ``<source>.fork.<n>`` (the first free ``n``). A ``run_id`` naming another run raises ``RunExistsError``; naming this same
        fork returns it."""
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ValueError("run_id must be a non-empty string")
        await self._ready()
        original = await self._api(lambda: self._reads.get_run(source), retry=True)
        if original is None:
            raise RunNotFoundError(source)
        wanted = None if version is None else check_version(version)
        definition = self.registry.workflow(original.workflow, wanted)
        value = original.input if input is None else normalise(input, "input of the fork")
        steps = await self._api(lambda: self._reads.list_steps(source), retry=True)
        point = fork_point(steps, from_seq)
        ids = [run_id] if run_id is not None else (fork_id(source, n) for n in range(1, 10_000))
        for candidate in ids:
            spec = await self._execution.specs.build(
                definition,
                value,
                candidate,
                priority=original.priority,
                attributes=original.attributes,
            )
            spec = replace(
                spec,
                namespace=original.namespace,
                quota=original.quota if input is None and original.quota else spec.quota,
                history=forked_records(steps, candidate, point),
                forked_from=(source, point),
            )
            [started], retried = await self._starts.create([spec], claim=False)
            run = StartOutcome(started.run, started.rejected).result()
            same = run.forked_from == spec.forked_from
            if started.created or (same and run_id is not None):
                break  # new, or this fork asked again by its id
            if run_id is not None:
                raise RunExistsError(run.id, run.status)
            if retried and same and run.created_at == spec.created_at:
                break  # the fork an outage-cut first write created
        else:
            raise RunlaneError(f"no free fork id for run {source!r}")
        if started.created:
            self._execution.count_starts(definition.name, [started])
            if not started.waiting:
                self._execution.send_started([run])
            self._execution.note_held([run])
        return run

    async def signal(self, run_id: str, name: str, payload: JSON = None) -> None:
        """Deliver a signal to the run's waiter, or buffer it until the run waits for it."""
        signal_name(name)
        value = normalise(payload, f"payload of signal {name!r}")
        await self._ready()
        await self._fence(run_id)
        if await self._api(lambda: self.store.deliver_signal(run_id, name, value, self.now())):
            self._execution.send([run_id])

    async def update(
        self, run_id: str, name: str, payload: JSON = None, *, timeout: float | None = 30.0
    ) -> JSON:
        """Send the update ``name`` to the run and return the workflow's reply to it.

        Delivered durably, like a signal: the body takes it with ``ctx.wait_for_update(name)``
        (an update sent before it asks waits for it) and answers with ``ctx.reply``.
        ``UpdateRejectedError`` when the body rejects it, or when the run ends without
        answering it (or had ended already); ``RunNotFoundError`` for an unknown run;
        ``TimeoutError`` after ``timeout`` wall-clock seconds (None: no limit), the update
        staying delivered."""
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        update = new_update(name, normalise(payload, f"payload of update {name!r}"))
        await self._ready()
        await self._fence(run_id)
        message = delivered(update)
        try:
            woken = await self._api(
                lambda: self.store.deliver_signal(
                    run_id, name, message, self.now(), kind=StepKind.UPDATE
                )
            )
        except RunFinishedError as finished:
            raise UpdateRejectedError(run_id, name, str(finished)) from None
        if woken:
            self._execution.send([run_id])
        return await self._execution.answers.wait(self.store, run_id, update, timeout)

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
                specs.append(
                    await self._execution.specs.build(definition, value, run_id, debounce=True)
                )
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
        self._execution.send([*woken, *ready_ids(started)])
        self._execution.note_held(new)
        return len(woken) + len(new) if created or new else 0

    async def cancel(self, run_id: str) -> bool:
        """Cancel a run and its children; False when there was nothing to cancel."""
        await self._ready()
        await self._fence(run_id)
        try:
            result = await self._api(lambda: self.store.cancel_run(run_id, self.now(), None))
        except RunNotFoundError:
            return False
        self._execution.cancelled(result)
        return bool(result.changed)

    async def pause(self, run_id: str) -> bool:
        """Pause a run: it finishes and records the step in flight, then takes no further turn
        (status ``paused``, active: its singleton and quota places are kept). Timers that come
        due, signals, events and updates are recorded meanwhile and taken up on ``resume``.
        False when the run is not active, or paused (or asked to pause) already;
        ``RunNotFoundError`` for an unknown run."""
        await self._ready()
        await self._fence(run_id)
        return await self._api(lambda: self.store.pause_run(run_id, self.now()))

    async def resume(self, run_id: str) -> bool:
        """Resume a paused run: it is due now (a singleton waiter waits for its place again),
        and its next turn takes up what came while it was paused. A pause asked of a turn still
        in flight is withdrawn. False when the run is not paused; ``RunNotFoundError`` for an
        unknown run."""
        await self._ready()
        await self._fence(run_id)
        resumed = await self._api(lambda: self.store.resume_run(run_id, self.now()))
        if resumed:
            self._execution.send([run_id])
        return resumed

    async def requeue(self, run_id: str) -> Run:
        """Retry a failed, dead or cancelled run from its checkpoints.

        A requeue is a start as far as the gates go: over its quota it raises
        ``ConcurrencyLimitError``, behind a full singleton backlog ``SingletonQueueFullError``,
        and nothing changes.
        """
        await self._ready()
        # Read as a view: a run failed by another engine's codec (its error under that key)
        # is requeued all the same, once the keys are put right.
        run = await self._api(lambda: self._view.get_run(run_id), retry=True)
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
        self._execution.watchers.forget(run_id)
        self._execution.send([run_id])
        return requeued

    # ---------------------------------------------------------------- reads

    async def get_run(self, run_id: str) -> Run | None:
        await self._ready()
        return await self._api(lambda: self._reads.get_run(run_id), retry=True)

    async def list_runs(
        self,
        *,
        workflow: Any = None,
        status: RunStatus | str | None = None,
        tag: str | None = None,
        limit: int = 100,
        offset: int = 0,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> list[Run]:
        """Runs matching every filter given, newest first. ``attributes``: the runs whose
        attributes hold every entry, equal in value and type (``1`` matches ``1.0``, never
        ``"1"`` nor ``True``); an index answers it on every store."""
        wanted_attributes = check_attributes(attributes, "attribute filter") if attributes else None
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
            lambda: self._reads.list_runs(
                workflow=name,
                status=wanted,
                tag=tag,
                limit=limit,
                offset=offset,
                attributes=wanted_attributes,
            ),
            retry=True,
        )

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        await self._ready()
        return await self._api(lambda: self._reads.list_steps(run_id), retry=True)

    async def list_engines(self) -> list[EngineInfo]:
        """The engines that announced themselves in this store (this one too), oldest first:
        what each serves, and whether it is alive (it beat within three of its leases)."""
        engines = await self.read(lambda store: store.list_engines())
        return judged(engines, self.now())

    async def read(self, query: Callable[[Reads], Awaitable[T]]) -> T:
        """``query`` on the store's reads, as the API's own reads run: after one failed try on
        a fresh connection, ``StoreUnavailableError``. For views (the HTTP API, the command
        line) that read more than runs and steps. An engine with ``scope_reads`` hands
        ``query`` its namespace's reads only (``runlane.namespaces.NamespaceReads``). A payload
        ``query`` reads that this engine cannot decode (no codec, or none of its keys) comes
        back as stored, ``{"$encoded": ...}``, where the engine's own reads raise
        ``PayloadCodecError``."""
        await self._ready()
        return await self._api(lambda: query(self._view), retry=True)

    async def _fence(self, run_id: str) -> None:
        """An engine fenced to its namespace acts on its namespace's runs only: a run of
        another one raises ``RunNotFoundError`` (an unknown id is left to the operation)."""
        if self._scope is None:
            return
        run = await self._api(lambda: self.store.get_run(run_id), retry=True)
        if run is not None and not sees(self._scope, run):
            raise RunNotFoundError(run_id)

    async def _api(self, call: Callable[[], Awaitable[T]], *, retry: bool = False) -> T:
        """An API call's store work. An outage raises ``StoreUnavailableError``; with ``retry``
        (reads, idempotent writes) only after one more try, which gets a fresh connection (the
        store has dropped the dead one by then)."""
        for last in (not retry, True):
            try:
                result = await call()
                if self._execution.outage.down:
                    self._execution.outage.succeeded()
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
        watchers = self._execution.watchers
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            completed = watchers.completed(run_id)
            if completed is not None:  # completed here a moment ago: no read
                return completed
            # Listen before reading, so a settle landing between the two is not missed.
            waiter = watchers.listen(run_id)
            if self._execution.executing(run_id):
                # A turn of it runs here: its settlement will come to the waiter without a read.
                settled = await self._wait_settled(waiter, deadline)
                if settled is not None:
                    return settled
            run = await self._read_through_outage(run_id, deadline)
            if run is None or run.is_terminal:
                watchers.forget(run_id)  # nobody else may be listening; don't keep it
            if run is None:
                raise RunNotFoundError(run_id)
            if run.is_terminal:
                return run
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                watchers.forget(run_id)
                raise TimeoutError(f"run {run_id!r} is still {run.status} after {timeout}s")
            settled = await self._wait_settled(waiter, deadline)
            if settled is not None:
                return settled

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
                run = await self._reads.get_run(run_id)
                self._execution.outage.succeeded()
                return run
            except Exception as exc:
                if not is_infrastructure(exc):
                    raise
                if deadline is not None and time.monotonic() + pause > deadline:
                    if isinstance(exc, StoreUnavailableError):
                        raise
                    raise unavailable(exc) from exc
                self._execution.outage.failed(exc, f"waiting for run {run_id}")
                await asyncio.sleep(pause)
                pause = min(1.0, pause * 2)

    # ---------------------------------------------------------------- the loop phases

    async def _pass(self, phase: Callable[[], Awaitable[int]]) -> int:
        """A pass (or one phase) called by hand: its turns meet an outage as the loop's do (the
        run is given back or left to its lease), and a poll the store cannot answer raises
        ``StoreUnavailableError`` after one more try, as any API call does."""
        await self._ready()
        return await self._api(phase, retry=True)

    async def tick(self) -> int:
        """One pass of every phase, executing what is due by the engine clock; returns turns run."""
        return await self._pass(self._execution.tick)

    async def run_pending(self) -> int:
        """Execute pending runs, highest priority then oldest first."""
        return await self._pass(self._execution.run_pending)

    async def resume_due_timers(self) -> int:
        """Resume suspended runs whose wake time has come, most overdue first."""
        return await self._pass(self._execution.resume_due_timers)

    async def recover_incomplete(self) -> int:
        """Re-execute runs whose lease expired (their instance died mid-turn)."""
        return await self._pass(self._execution.recover_incomplete)

    async def sweep_timeouts(self) -> int:
        """Cancel runs (and their subtrees) that exceeded their execution timeout."""
        return await self._pass(self._execution.sweep_timeouts)

    async def fire_schedules(self) -> int:
        """Start the runs of the schedules' due windows (each window once, across engines)."""
        return await self._pass(self._execution.fire_schedules)

    async def prune_retained(self) -> int:
        """Delete one batch of settled runs past their ``retention`` period, when one is due
        (returns how many; 0 when the driving loop runs the batch beside its turns)."""
        return await self._pass(self._execution.prune_retained)

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


def _scope(namespace: str | None, scope_reads: bool) -> str | None:
    """The namespace an engine is fenced to (None: its reads and keys are shared)."""
    if not scope_reads:
        return None
    if not isinstance(namespace, str) or not namespace:
        raise DefinitionError(
            "scope_reads=True fences the engine to its namespace: give it one (namespace=...)"
        )
    return namespace


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


__all__ = ["Engine", "RunStatus"]
