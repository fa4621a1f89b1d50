"""Drive one leased run to its next suspension point.

A turn replays the body from the top. Operations already recorded return their recorded result;
new ones execute and are *staged*; staged records are flushed with the next store write, and
always before the next side effect starts, so a crash re-executes at most the step in flight.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from .attributes import AttributeValue
from .context import ChildOp, Context, Operation, StepOp
from .definitions import StepDefinition, WorkflowDefinition
from .errors import (
    Abandon,
    Cancelling,
    ChildFailedError,
    ContinueAsNew,
    EventTimeoutError,
    FatalError,
    GatherError,
    LeaseLostError,
    NewerCode,
    NonDeterminismError,
    Pausing,
    RunCancelling,
    RunlaneError,
    RunPausing,
    Suspend,
    UpdateRejectedError,
    error_dict,
    raise_stored,
    with_attempt,
)
from .faults import is_infrastructure
from .fences import StepContext, within
from .leases import LeaseKeeper
from .models import (
    JSON,
    Claim,
    Event,
    Lease,
    RetryTimer,
    Run,
    RunSpec,
    RunStatus,
    Settled,
    Settlement,
    Signal,
    Started,
    StepKind,
    StepRecord,
    StepStatus,
    Writes,
    buffered_name,
    evolved,
    ready_ids,
    settled_run,
    with_handler_error,
)
from .options import EngineOptions
from .releases import Unreleased, give_back
from .serialization import normalise
from .stats import EngineStats
from .step_queues import QueueRequest
from .stores.base import Store
from .tracing import Tracing
from .updates import Update

log = logging.getLogger(__name__)

T = TypeVar("T")

Drive = Callable[["Turn"], Awaitable["tuple[Settlement, bool] | None"]]
"""What decides a turn in place of the body: how the run settles (and whether to discard the
turn's records), or None when it suspends."""

BATCH = 500
"""Children are started and checked in batches of this many, so wide fans stay few writes."""

ATTRIBUTES = "attributes"
"""The name of a ``ctx.set_attributes`` record (its kind is ``attributes`` too)."""

NEWER_CODE_RETRY = 2.0
"""Seconds a run whose history this code cannot replay for want of a patch (``NewerCode``)
waits before another turn: mid-deploy, an engine or worker with the new code takes it then."""


class RemoteStepDriver(Protocol):
    """What settles a turn's remote steps (``remote.steps.RemoteSteps`` on an engine): the
    recorded result, or the attempt dispatched to a worker group; None when the run suspends."""

    async def settle(self, turn: Turn, op: StepOp) -> Settled | None: ...


class TurnHost(Protocol):
    """What a turn needs from its engine."""

    store: Store
    options: EngineOptions
    remote_driver: RemoteStepDriver | None  # None: no transport, no remote steps
    leases: LeaseKeeper

    def now(self) -> datetime: ...

    def successor_lease(self) -> Lease | None:
        """A lease for the next singleton waiter, when this engine can run it now."""
        ...

    def admission_retry(self) -> RetryTimer:
        """The fallback timer of a step its queue did not admit."""
        ...

    def wake(self, run_ids: Iterable[str]) -> None:
        """Make runs the store just woke execute soon (step queue waiters a slot is for, the
        singleton waiters a cancelled child's slot is for)."""
        ...

    def answered(self, run_id: str) -> None:
        """The turn of ``run_id`` just wrote a reply to an update: its callers here read it."""
        ...

    def resolve_step(
        self, fn_or_name: Callable[..., Any] | str, group: str | None
    ) -> StepDefinition: ...

    async def call_step(self, definition: StepDefinition, input: JSON) -> JSON: ...

    @property
    def stats(self) -> EngineStats:
        """Where the turn counts what it did (step durations)."""
        ...

    @property
    def tracing(self) -> Tracing:
        """The spans of the turn's steps (a no-op unless OpenTelemetry is configured)."""
        ...

    async def child_spec(
        self, workflow: Any, input: JSON, run_id: str, parent: Run, *, detached: bool = False
    ) -> RunSpec:
        """A child's start; a ``detached`` one outlives its parent's cancellation."""
        ...

    async def continuation_spec(self, run: Run, input: JSON) -> RunSpec: ...

    async def handler_spec(self, workflow: str, run: Run, settlement: Settlement) -> RunSpec:
        """The start of ``workflow`` as the failure handler of ``run`` settling so."""
        ...


def recorded_outcome(record: StepRecord | None) -> Settled | None:
    """A step's outcome as its record holds it (replayed, never executed again); None while it
    has none (never run, in flight, or waiting to be retried)."""
    if record is not None and record.status == StepStatus.COMPLETED:
        return Settled(True, record.output)
    if record is not None and record.status == StepStatus.FAILED:
        return Settled(False, None, record.error)
    return None


@dataclass
class TurnOutcome:
    state: str  # "settled" | "suspended" | "rewake" | "abandoned"
    woken: list[str] = field(default_factory=list)
    wake_at: datetime | None = None
    status: RunStatus | None = None
    settled: Run | None = None  # the run as this turn settled it
    successor: Claim | None = None  # the singleton waiter the settlement leased to this engine
    outage: BaseException | None = None  # abandoned because the store could not be reached
    unreleased: Unreleased | None = None  # ... and the run could not be given back yet


class Turn:
    waits_for_newer_code = True
    """A patch marker this code does not know suspends the run for newer code (``NewerCode``)
    rather than failing it: the engines of a rolling deploy run old code and new."""

    def __init__(
        self, host: TurnHost, claim: Claim, owner: str, definition: WorkflowDefinition
    ) -> None:
        self.host = host
        self.run = claim.run
        self.fence = claim.run.fence  # every step this turn executes or sends presents it
        self.owner = owner
        self.definition = definition
        self.records = {r.seq: r for r in claim.steps}
        self.signals: list[Signal] = list(claim.signals)
        self.staged: dict[int, StepRecord] = {}
        # ``ctx.set_attributes`` records not written yet: each goes with its merge into the
        # run's attributes (``Store.set_attributes``), never with another write's records.
        self.attributes_set: dict[int, StepRecord] = {}
        self.consumed: list[int] = []
        self.wakes: list[datetime] = []
        self.live_errors: dict[int, BaseException] = {}
        self.diverged: NonDeterminismError | None = None
        self.created: list[str] = []  # children started by this turn, to execute right away
        # Step queues: whether the run entered one, and the seqs of queued steps whose attempt
        # is staged but whose slot is not released yet (it goes with the turn's next write).
        self.queued = claim.run.queued
        self.unreleased: list[int] = []
        self.awaited: list[tuple[str, int]] = []  # event waits left pending (see ``find_event``)
        self.denied = False  # a step queue did not admit a step: the run suspends ``blocked``
        self.patches: dict[str, bool] = {}  # each change id's answer (``patched``), this turn
        self.replied: set[str] = set()  # the updates answered so far (``reply``), this turn
        self.last_recorded = max(self.records, default=0)
        self._seq = 0
        self._lock = asyncio.Lock()

    # ---------------------------------------------------------------- bookkeeping

    def now(self) -> datetime:
        return self.host.now()

    async def io(self, call: Awaitable[T]) -> T:
        """A store call made for this turn. An outage abandons the turn: it unwinds the body as
        ``Abandon`` (a ``BaseException``), so the body never sees it as a step's error."""
        try:
            return await call
        except Exception as exc:
            if is_infrastructure(exc):
                raise Abandon(exc) from exc
            raise

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @property
    def position(self) -> int:
        """The last position the body took (its operations so far, patches included)."""
        return self._seq

    def recorded(self, seq: int, kind: StepKind, name: str) -> StepRecord | None:
        record = self.staged.get(seq) or self.records.get(seq)
        if record is None:
            return None
        if record.kind != kind or record.name != name:
            if record.kind == StepKind.PATCH and self.waits_for_newer_code:
                raise NewerCode(self.run.id, seq, record.name)
            self.diverged = NonDeterminismError(
                run_id=self.run.id,
                seq=seq,
                recorded=f"{record.kind} {record.name!r}",
                new=f"{kind} {name!r}",
            )
            raise self.diverged
        return record

    def patched(self, change_id: str) -> bool:
        """``ctx.patched``: the marker at the next position, or no history left there (the
        new code runs fresh: the marker is recorded), takes the patched branch; any other
        operation there (a history from before the change) takes the old one and leaves the
        position to it."""
        if change_id in self.patches:
            return self.patches[change_id]
        seq = self._seq + 1
        record = self.staged.get(seq) or self.records.get(seq)
        fresh = record is None and seq > self.last_recorded
        marked = record is not None and record.kind == StepKind.PATCH and record.name == change_id
        if fresh:
            self.complete(seq, StepKind.PATCH, change_id, None, None)
        if fresh or marked:
            self._seq = seq
        self.patches[change_id] = fresh or marked
        return fresh or marked

    def deprecate_patch(self, change_id: str) -> None:
        """``ctx.deprecate_patch``: the marker of ``change_id`` at the next position, if the
        history has one there, is passed over; nothing is recorded either way."""
        record = self.staged.get(self._seq + 1) or self.records.get(self._seq + 1)
        if record is not None and record.kind == StepKind.PATCH and record.name == change_id:
            self._seq += 1

    async def reply(self, update: Update, value: JSON, error: str | None) -> None:
        """``ctx.reply``: a ``reply`` record answering ``update``, written before the body goes
        on (``answered``); replayed, the record is there and nothing is written again."""
        if update.id in self.replied:
            raise RunlaneError(f"update {update.name!r} ({update.id}) was answered already")
        self.replied.add(update.id)
        seq = self.next_seq()
        if self.recorded(seq, StepKind.REPLY, update.name) is not None:
            return
        answer = {"update": update.id}
        if error is None:
            output = normalise(value, f"reply to update {update.name!r}")
            self.complete(seq, StepKind.REPLY, update.name, output, None, input=answer)
        else:
            rejection = UpdateRejectedError(self.run.id, update.name, error)
            self.fail(seq, StepKind.REPLY, update.name, rejection, None, input=answer)
        await self.answered()

    async def answered(self) -> None:
        """A reply was staged: it is written now, and this instance's callers hear of it."""
        await self.flush()

    async def side_effect(self, fn: Callable[[], Any]) -> Any:
        """Call a side effect's ``fn`` (awaiting what it returns), once what is staged is
        written: a crash after it re-runs nothing before it."""
        await self.flush()
        result = fn()
        if inspect.isawaitable(result):
            result = await result
        return result

    def stage(self, record: StepRecord) -> None:
        if record.kind == StepKind.ATTRIBUTES:
            self.attributes_set[record.seq] = record
            # The run as this turn leaves it (a continuation carries its attributes on).
            self.run = evolved(self.run, attributes={**self.run.attributes, **record.output})
        else:
            self.staged[record.seq] = record

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """``ctx.set_attributes``: recorded at the next position and staged for the next write,
        which merges them into the run's; a replay finds them recorded and writes nothing."""
        seq = self.next_seq()
        if self.recorded(seq, StepKind.ATTRIBUTES, ATTRIBUTES) is None:
            self.complete(seq, StepKind.ATTRIBUTES, ATTRIBUTES, dict(attributes), None)

    async def cancel_child(self, child_id: str, error: dict[str, object]) -> None:
        """Cancel a child (and its subtree); what that wakes, other than this run, runs now."""
        cancelled = await self.io(self.host.store.cancel_run(child_id, self.now(), error))
        self.host.wake(w for w in cancelled.woken if w != self.run.id)

    def wake_by(self, when: datetime) -> None:
        """The run is due again by ``when`` (a retry's backoff, a check of a dispatched step):
        its suspension keeps the earliest of these."""
        self.wakes.append(when)

    def keep_error(self, seq: int, exc: BaseException) -> None:
        """The exception the body gets for op ``seq``'s failure in this turn (the live one,
        with its traceback and cause, rather than one rebuilt from the record)."""
        self.live_errors[seq] = exc

    def consume(self, seqs: Iterable[int]) -> None:
        """Buffered signals taken by this turn: their consumption goes with the next write."""
        self.consumed.extend(seqs)

    def _record(
        self,
        seq: int,
        kind: StepKind,
        name: str,
        status: StepStatus,
        prior: StepRecord | None,
        **fields: Any,
    ) -> None:
        now = self.now()
        done = status in (StepStatus.COMPLETED, StepStatus.FAILED)
        self.stage(
            StepRecord(
                run_id=self.run.id,
                seq=seq,
                name=name,
                kind=kind,
                status=status,
                attempts=fields.pop("attempts", prior.attempts if prior else 0),
                started_at=fields.pop(
                    "started_at", prior.started_at if prior and prior.started_at else now
                ),
                finished_at=now if done else None,
                input=fields.pop("input", prior.input if prior else None),
                **fields,
            )
        )

    def complete(
        self,
        seq: int,
        kind: StepKind,
        name: str,
        output: JSON,
        prior: StepRecord | None,
        *,
        consumed: int | None = None,
        **fields: Any,
    ) -> None:
        self._record(seq, kind, name, StepStatus.COMPLETED, prior, output=output, **fields)
        if consumed is not None:
            self.consumed.append(consumed)

    def fail(
        self,
        seq: int,
        kind: StepKind,
        name: str,
        exc: BaseException,
        prior: StepRecord | None,
        **fields: Any,
    ) -> dict[str, Any]:
        error = error_dict(exc)
        self._record(seq, kind, name, StepStatus.FAILED, prior, error=error, **fields)
        return error

    def park(
        self,
        seq: int,
        kind: StepKind,
        name: str,
        wake: datetime | None,
        prior: StepRecord | None,
        **fields: Any,
    ) -> None:
        """Record a pending wait and suspend the turn."""
        if prior is None or prior.status != StepStatus.PENDING:
            self._record(seq, kind, name, StepStatus.PENDING, prior, wake_at=wake, **fields)
        if wake is not None:
            self.wake_by(wake)
        raise Suspend()

    def deadline(
        self, record: StepRecord | None, timeout: float | timedelta | None
    ) -> datetime | None:
        if record is not None:
            return record.wake_at
        if timeout is None:
            return None
        delta = timeout if isinstance(timeout, timedelta) else timedelta(seconds=float(timeout))
        return self.now() + delta

    async def wait_until(
        self, seq: int, name: str, wake: datetime | None, record: StepRecord | None
    ) -> None:
        if record is not None and record.status == StepStatus.COMPLETED:
            return
        if wake is None or wake <= self.now():
            self.complete(seq, StepKind.SLEEP, name, None, record, wake_at=wake)
            return
        self.park(seq, StepKind.SLEEP, name, wake, record)

    # ---------------------------------------------------------------- waits and recorded values

    async def sleep(self, delay: float) -> None:
        """``ctx.sleep``: due ``delay`` seconds after the first execution reached it."""
        seq = self.next_seq()
        record = self.recorded(seq, StepKind.SLEEP, "sleep")
        wake = record.wake_at if record is not None else self.now() + timedelta(seconds=delay)
        await self.wait_until(seq, "sleep", wake, record)

    async def sleep_until(self, when: datetime) -> None:
        seq = self.next_seq()
        record = self.recorded(seq, StepKind.SLEEP, "sleep")
        await self.wait_until(seq, "sleep", record.wake_at if record else when, record)

    async def wait_for_message(
        self, kind: StepKind, name: str, timeout: float | timedelta | None, expired: type[Exception]
    ) -> JSON:
        """The payload of the next message (a signal, an update) a ``kind`` wait takes."""
        seq = self.next_seq()
        record = self.recorded(seq, kind, name)
        if record is not None and record.status == StepStatus.COMPLETED:
            return record.output
        missed = f"no {kind} {name!r} within the timeout"
        if record is not None and record.status == StepStatus.FAILED:
            raise expired(missed)
        signal = self.take_signal(buffered_name(kind, name))
        if signal is not None:
            self.complete(seq, kind, name, signal.payload, record, consumed=signal.id)
            return signal.payload
        deadline = self.deadline(record, timeout)
        if deadline is not None and deadline <= self.now():
            self.fail(seq, kind, name, expired(missed), record)
            raise expired(missed)
        self.park(seq, kind, name, deadline, record)
        raise AssertionError("unreachable")  # pragma: no cover

    async def wait_for_event(
        self, name: str, match: Callable[[JSON], bool] | None, timeout: float | timedelta | None
    ) -> JSON:
        """``ctx.wait_for_event``: the next event ``name`` published after the wait began."""
        seq = self.next_seq()
        record = self.recorded(seq, StepKind.EVENT, name)
        if record is not None and record.status == StepStatus.COMPLETED:
            return record.output
        if record is not None and record.status == StepStatus.FAILED:
            raise EventTimeoutError(f"no event {name!r} within the timeout")
        after = (
            int(record.input["after"])
            if record is not None
            else await self.io(self.host.store.latest_event_seq())
        )
        event = await self.find_event(name, after, match)
        if event is not None:
            self.complete(seq, StepKind.EVENT, name, event.payload, record, input={"after": after})
            return event.payload
        deadline = self.deadline(record, timeout)
        if deadline is not None and deadline <= self.now():
            self.fail(
                seq,
                StepKind.EVENT,
                name,
                EventTimeoutError(f"no event {name!r} within the timeout"),
                record,
            )
            raise EventTimeoutError(f"no event {name!r} within the timeout")
        self.park(seq, StepKind.EVENT, name, deadline, record, input={"after": after})
        raise AssertionError("unreachable")  # pragma: no cover

    def recorded_now(self) -> datetime:
        """``ctx.now``: the clock's time, recorded once and replayed identically."""
        seq = self.next_seq()
        record = self.recorded(seq, StepKind.NOW, "now")
        if record is not None and record.status == StepStatus.COMPLETED:
            return datetime.fromisoformat(str(record.output))
        value = self.now()
        self.complete(seq, StepKind.NOW, "now", value.isoformat(), record)
        return value

    async def recorded_side_effect(self, fn: Callable[[], Any]) -> JSON:
        """``ctx.side_effect``: ``fn`` called once (``side_effect``), its result recorded."""
        seq = self.next_seq()
        record = self.recorded(seq, StepKind.SIDE_EFFECT, "side_effect")
        if record is not None and record.status == StepStatus.COMPLETED:
            return record.output
        value = normalise(await self.side_effect(fn), "side_effect result")
        self.complete(seq, StepKind.SIDE_EFFECT, "side_effect", value, record)
        return value

    def take_signal(self, name: str) -> Signal | None:
        for i, signal in enumerate(self.signals):
            if signal.name == name:
                return self.signals.pop(i)
        return None

    async def find_event(
        self, name: str, after: int, match: Callable[[JSON], bool] | None
    ) -> Event | None:
        while True:
            events = await self.io(self.host.store.events_after(name, after, BATCH))
            for event in events:
                if match is None or match(event.payload):
                    return event
            if events:
                after = events[-1].seq
            if len(events) < BATCH:
                # None yet: the suspension checks, under the publishers' lock, that none came
                # after ``after`` while this turn went on.
                self.awaited.append((name, after))
                return None

    # ---------------------------------------------------------------- writes

    def _take_writes(self, children: Sequence[RunSpec] = ()) -> Writes:
        writes = Writes(tuple(self.staged.values()), tuple(self.consumed), tuple(children))
        self.records.update(self.staged)
        self.staged = {}
        self.consumed = []
        return writes

    def _unwritten(self, writes: Writes, freed: Sequence[int]) -> None:
        """Stage again the records of a write the store may not have taken (an outage), and
        the slots it freed, so the turn's release carries them: a slot whose step's attempt is
        recorded is never asked for again, and would be held until the run settles. Anything
        staged since is newer and wins."""
        for record in writes.steps:
            if record.seq not in self.staged and record.seq not in self.attributes_set:
                self.stage(record)
        self.consumed = [*writes.consumed_signals, *self.consumed]
        self.unreleased = [*freed, *(s for s in self.unreleased if s not in freed)]

    async def _write(self, writes: Writes, call: Awaitable[T], freed: Sequence[int] = ()) -> T:
        """A write of this turn: ``writes`` and the slots of the steps at ``freed``."""
        try:
            result = await self.io(call)
        except Abandon as abandon:
            if abandon.outage is not None:
                self._unwritten(writes, freed)
            raise
        if any(record.kind == StepKind.REPLY for record in writes.steps):
            self.host.answered(self.run.id)
        return result

    async def flush(self, children: Sequence[RunSpec] = ()) -> list[Started]:
        """Write staged records (and create children) in one fenced transaction; attributes
        the body set go first, in one of their own with what is staged then."""
        if self.unreleased:
            await self.release()  # the staged records go with the slots (no children here)
        async with self._lock:
            await self._flush_attributes()
            if not self.staged and not self.consumed and not children:
                return []
            writes = self._take_writes(children)
            checkpoint = self.host.store.checkpoint(self.run.id, self.owner, writes, self.now())
            return await self._fenced(writes, checkpoint)

    def take_attributes(self) -> list[StepRecord]:
        """The ``set_attributes`` records not written yet, by seq; from now on recorded."""
        records = [self.attributes_set[seq] for seq in sorted(self.attributes_set)]
        self.records.update(self.attributes_set)
        self.attributes_set = {}
        return records

    def _attributes_call(self) -> tuple[Writes, Awaitable[None]] | None:
        """The write of the attributes the body set, with every record staged before it;
        None when the body set none since the last one."""
        if not self.attributes_set:
            return None
        records = self.take_attributes()
        merged = {key: value for record in records for key, value in record.output.items()}
        staged = self._take_writes()
        writes = replace(staged, steps=(*staged.steps, *records))
        call = self.host.store.set_attributes(self.run.id, self.owner, writes, merged, self.now())
        return writes, call

    async def _flush_attributes(self) -> None:
        """Write the attributes the body set since the last write, if any (the caller holds
        the turn's lock): a cancellation or a lost lease ends the turn, as ``flush``'s do."""
        attributes = self._attributes_call()
        if attributes is not None:
            await self._fenced(*attributes)

    async def _fenced(self, writes: Writes, call: Awaitable[T], freed: Sequence[int] = ()) -> T:
        """A fenced write of this turn: a cancellation or a lost lease ends the turn."""
        try:
            return await self._write(writes, call, freed)
        except RunCancelling:
            raise Cancelling() from None
        except RunPausing as pausing:
            # The write went through; children it started run as usual.
            self.created.extend(ready_ids(pausing.started))
            raise Pausing() from None
        except LeaseLostError:
            raise Abandon() from None

    # ---------------------------------------------------------------- step queues

    async def admit(self, op: StepOp) -> bool:
        """Ask the step's queue to admit it (flushing what is staged in the same write); when
        it does not, the turn's wakes get the time to ask again and the step waits."""
        assert op.definition.queue is not None
        request = QueueRequest(op.definition.queue, op.seq, op.priority, op.fairness_key)
        async with self._lock:
            await self._flush_attributes()
            writes, release = self._take_writes(), self._take_unreleased()
            ask = self.host.store.admit_step(
                self.run.id,
                self.owner,
                writes,
                request,
                self.now(),
                self.host.admission_retry(),
                release=release,
            )
            admission = await self._fenced(writes, ask, release)
            self.queued = True
        if admission.woken:
            self.host.wake(admission.woken)
        if not admission.admitted:
            self.denied = True
            if admission.retry_at is not None:
                self.wake_by(admission.retry_at)
        return admission.admitted

    async def release(self) -> None:
        """Write what is staged (the queued steps' attempts among it) and free those steps'
        slots, in one write; the waiters the slots are for are woken at once."""
        async with self._lock:
            if not self.unreleased:
                return
            woken = await self._fenced(*self._release_call())
        if woken:
            self.host.wake(woken)

    def _release_call(self) -> tuple[Writes, Awaitable[list[str]], Sequence[int]]:
        writes, seqs = self._take_writes(), self._take_unreleased()
        call = self.host.store.release_steps(self.run.id, self.owner, writes, seqs, self.now())
        return writes, call, seqs

    def _take_unreleased(self) -> list[int]:
        seqs, self.unreleased = self.unreleased, []
        return seqs

    async def recorded_attempt(self, op: StepOp, *, alone: bool) -> None:
        """A queued step's attempt was staged: its slot goes with the turn's next write, or at
        once when other steps of the turn still run (their next write may be a while off)."""
        record = self.staged.get(op.seq)
        if op.definition.queue is None or record is None or record.status == StepStatus.RUNNING:
            return
        self.unreleased.append(op.seq)
        if not alone:
            await self.release()

    # ---------------------------------------------------------------- steps

    async def settle_step(self, op: StepOp, *, alone: bool = True) -> Settled | None:
        """Run or replay one step; None means it waits (a retry backoff) and the run suspends.
        ``alone``: no other step of the turn is being settled beside it."""
        queued = op.definition.queue is not None
        record = self.recorded(op.seq, StepKind.STEP, op.name)
        replayed = recorded_outcome(record)
        if op.definition.remote:
            settled = replayed or await self.settle_remote(op)
            await self.recorded_attempt(op, alone=alone)
            return settled
        if replayed is not None:
            return replayed
        if record is not None and record.wake_at is not None and record.wake_at > self.now():
            self.wake_by(record.wake_at)
            return None
        attempt = (record.attempts if record else 0) + 1
        if queued:
            if not await self.admit(op):  # flushes what is staged, as below
                return None
        else:
            await self.flush()
        await self.ensure_lease()
        settled = await self._execute_step(op, record, attempt)
        await self.recorded_attempt(op, alone=alone)
        return settled

    def resolve_step(
        self, fn_or_name: Callable[..., Any] | str, group: str | None
    ) -> StepDefinition:
        return self.host.resolve_step(fn_or_name, group)

    @property
    def dispatches_remote(self) -> bool:
        """Whether a remote step can be dispatched from this turn."""
        return self.host.remote_driver is not None

    async def settle_remote(self, op: StepOp) -> Settled | None:
        """A remote step without a recorded outcome: the host's driver dispatches it, or
        follows the attempt in flight."""
        assert self.host.remote_driver is not None
        return await self.host.remote_driver.settle(self, op)

    async def ensure_lease(self) -> None:
        """Before a step starts: a lease run out by this engine's clock (its process was frozen
        or starved past it, or the keeper found it lost) is confirmed with the store first, and
        the turn is abandoned when another took the run over. Without this a turn resumed after
        a freeze would start its next step at once whenever nothing was staged to write (the
        first step after its claim): a step in flight is beyond any fence."""
        leases = self.host.leases
        if leases.expired(self.run.id, self.now()) and not await self.io(
            leases.confirm(self.run.id, self.owner)
        ):
            raise Abandon()

    async def _execute_step(
        self, op: StepOp, record: StepRecord | None, attempt: int
    ) -> Settled | None:
        started = self.now()
        began = time.monotonic()
        run = self.run
        context = StepContext(run.id, op.seq, op.name, attempt, self.fence)
        try:
            with self.host.tracing.step(run.id, run.workflow, op.name, op.seq, attempt):
                output = normalise(
                    await within(context, self.host.call_step(op.definition, op.input)),
                    f"output of step {op.name!r}",
                )
        except Exception as exc:
            self.host.stats.step_took(self.run.workflow, op.name, time.monotonic() - began)
            return self._step_failed(op, record, attempt, started, exc)
        self.host.stats.step_took(self.run.workflow, op.name, time.monotonic() - began)
        self.complete(
            op.seq,
            StepKind.STEP,
            op.name,
            output,
            record,
            input=op.input,
            attempts=attempt,
            started_at=started,
            fence=self.fence,
        )
        return Settled(True, output)

    def _step_failed(
        self, op: StepOp, record: StepRecord | None, attempt: int, started: datetime, exc: Exception
    ) -> Settled | None:
        retry_in = op.retry.retry_in(attempt, isinstance(exc, FatalError))
        # The record keeps this attempt's times; its error lists every failed attempt's.
        earlier = record.error if record is not None else None
        error = with_attempt(error_dict(exc), earlier, attempt, started, self.now())
        wake = None if retry_in is None else self.now() + timedelta(seconds=retry_in)
        status = StepStatus.FAILED if wake is None else StepStatus.PENDING
        self._record(
            op.seq,
            StepKind.STEP,
            op.name,
            status,
            record,
            input=op.input,
            attempts=attempt,
            started_at=started,
            error=error,
            wake_at=wake,
            fence=self.fence,
        )
        if wake is not None:
            self.wake_by(wake)
            return None
        self.keep_error(op.seq, exc)
        return Settled(False, None, error)

    # ---------------------------------------------------------------- children

    async def settle_children(self, ops: Sequence[ChildOp]) -> dict[int, Settled | None]:
        results: dict[int, Settled | None] = {}
        to_start: list[ChildOp] = []
        to_check: list[ChildOp] = []
        for op in ops:
            record = self.recorded(op.seq, op.kind, op.name)
            if record is None:
                to_start.append(op)
            elif record.status == StepStatus.COMPLETED:
                results[op.seq] = Settled(True, record.output)
            elif record.status == StepStatus.FAILED:
                results[op.seq] = Settled(False, None, record.error)
            else:
                to_check.append(op)
        for op, started in await self._start_children(to_start):
            if started.rejected is not None:
                results[op.seq] = self._child_rejected(op, started.rejected)
            else:
                self._record(
                    op.seq,
                    op.kind,
                    op.name,
                    StepStatus.PENDING,
                    None,
                    input={"child_id": op.child_id},
                )
                to_check.append(op)
        results.update(await self._check_children(to_check))
        return results

    async def _start_children(self, ops: Sequence[ChildOp]) -> list[tuple[ChildOp, Started]]:
        pairs: list[tuple[ChildOp, Started]] = []
        for i in range(0, len(ops), BATCH):
            chunk = ops[i : i + BATCH]
            specs = [
                await self.host.child_spec(
                    op.workflow, op.input, op.child_id, self.run, detached=op.detached
                )
                for op in chunk
            ]
            started = await self.flush(specs)
            self.created.extend(ready_ids(started))
            pairs.extend(zip(chunk, started, strict=True))
        return pairs

    def _child_rejected(self, op: ChildOp, rejection: Exception) -> Settled:
        failure = ChildFailedError(op.child_id, error_dict(rejection, with_traceback=False))
        failure.__cause__ = rejection
        error = self.fail(op.seq, op.kind, op.name, failure, None, input={"child_id": op.child_id})
        self.keep_error(op.seq, failure)
        return Settled(False, None, error)

    async def _check_children(self, ops: Sequence[ChildOp]) -> dict[int, Settled | None]:
        results: dict[int, Settled | None] = {}
        for i in range(0, len(ops), BATCH):
            chunk = ops[i : i + BATCH]
            runs = await self.io(self.host.store.get_runs([op.child_id for op in chunk]))
            for op in chunk:
                results[op.seq] = self._child_result(op, runs.get(op.child_id))
        return results

    def _child_result(self, op: ChildOp, child: Run | None) -> Settled | None:
        prior = self.staged.get(op.seq) or self.records.get(op.seq)
        if child is not None and not child.is_terminal:
            return None
        if child is not None and child.status == RunStatus.COMPLETED:
            self.complete(op.seq, op.kind, op.name, child.output, prior)
            return Settled(True, child.output)
        child_error = (child.error if child else None) or {
            "type": "ChildFailedError" if child else "RunNotFoundError",
            "message": f"child run ended {child.status}" if child else "child run vanished",
        }
        failure = ChildFailedError(op.child_id, child_error)
        failure.__cause__ = raise_stored(child_error)
        error = self.fail(op.seq, op.kind, op.name, failure, prior)
        self.keep_error(op.seq, failure)
        return Settled(False, None, error)

    async def start_child(self, op: ChildOp) -> str:
        record = self.recorded(op.seq, StepKind.START_CHILD, op.name)
        if record is not None and record.status == StepStatus.COMPLETED:
            return str(record.output)
        if record is not None and record.status == StepStatus.FAILED:
            raise raise_stored(record.error or {})
        [(_, started)] = await self._start_children([op])
        if started.rejected is not None:
            self._child_rejected(op, started.rejected)
            raise self.live_errors[op.seq]
        self.complete(
            op.seq,
            StepKind.START_CHILD,
            op.name,
            op.child_id,
            None,
            input={"child_id": op.child_id},
        )
        return op.child_id

    # ---------------------------------------------------------------- awaiting operations

    async def resolve_one(self, op: Operation) -> JSON:
        [settled] = await self._settle([op])
        if settled is None:
            raise Suspend()
        if not settled.ok:
            raise self._error_for(op, settled)
        return settled.value

    def _error_for(self, op: Operation, settled: Settled) -> BaseException:
        live = self.live_errors.get(op.seq)
        return live if live is not None else raise_stored(settled.error or {})

    async def _settle(self, ops: Sequence[Operation]) -> list[Settled | None]:
        for op in ops:
            if op.turn is not self:
                raise RunlaneError("an operation was passed to a context it does not belong to")
        child_ops = [op for op in ops if isinstance(op, ChildOp)]
        children = await self.settle_children(child_ops) if child_ops else {}
        steps = [op for op in ops if isinstance(op, StepOp)]
        if len(steps) == 1:  # the common case: no task needed for one step
            results: list[Settled | None] = [await self.settle_step(steps[0])]
        else:
            results = await self._settle_steps(steps)
        by_seq: dict[int, Settled | None] = {
            **children,
            **dict(zip((op.seq for op in steps), results, strict=True)),
        }
        return [by_seq[op.seq] for op in ops]

    async def _settle_steps(self, steps: Sequence[StepOp]) -> list[Settled | None]:
        """Settle steps side by side. When one stops the turn (an outage, a lost lease, a
        cancellation), the others still finish, so nothing of the turn runs after it ended."""
        outcomes = await asyncio.gather(
            *(self.settle_step(op, alone=False) for op in steps), return_exceptions=True
        )
        results: list[Settled | None] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            results.append(outcome)
        return results

    async def gather(
        self, ops: Sequence[Operation], *, fail_fast: bool, settled: bool
    ) -> list[Any]:
        results = await self._settle(ops)
        waiting = any(r is None for r in results)
        failures = [
            {"index": i, "id": self._op_id(op), "error": r.error}
            for i, (op, r) in enumerate(zip(ops, results, strict=True))
            if r is not None and not r.ok
        ]
        if failures and not settled and (fail_fast or not waiting):
            if waiting:
                await self._cancel_waiting(ops, results)
            raise GatherError(failures)
        if waiting:
            raise Suspend()
        if settled:
            return list(results)
        return [r.value for r in results if r is not None]

    def _op_id(self, op: Operation) -> str:
        return op.child_id if isinstance(op, ChildOp) else f"{self.run.id}:{op.seq}"

    async def _cancel_waiting(
        self, ops: Sequence[Operation], results: Sequence[Settled | None]
    ) -> None:
        for op, result in zip(ops, results, strict=True):
            if result is None and isinstance(op, ChildOp):
                error: dict[str, object] = {
                    "type": "Cancelled",
                    "message": "a sibling failed (fail_fast)",
                }
                await self.cancel_child(op.child_id, error)

    # ---------------------------------------------------------------- the turn

    async def execute(
        self, verdict: Settlement | None = None, drive: Drive | None = None
    ) -> TurnOutcome:
        """Run the body to its next suspension point; with ``verdict``, settle the run so
        without running it (a run recovered too often, leased to be declared dead); with
        ``drive``, let it decide the turn instead of the body (a remote workflow's decision)."""
        self.host.leases.hold(self.run.id, self.owner, self.run.lease_expires_at)
        try:
            outcome = await self._execute(verdict, drive)
        finally:
            self.host.leases.release(self.run.id, self.owner)
        outcome.woken = [*self.created, *outcome.woken]
        return outcome

    async def _execute(self, verdict: Settlement | None, drive: Drive | None = None) -> TurnOutcome:
        try:
            if verdict is not None:
                ending: tuple[Settlement, bool] | None = (verdict, False)
            else:
                ending = await (drive(self) if drive is not None else self._body())
            if ending is None:
                return await self._suspend()
            return await self._finish(*ending)
        except Abandon as abandon:
            if abandon.outage is None:
                return TurnOutcome("abandoned")
            return await self._release(abandon.outage)

    async def _body(self) -> tuple[Settlement, bool] | None:
        """Run the body: how the run settles (and whether to discard the turn's records), or
        None when it suspends. Only the body's own outcome is decided here."""
        ctx = Context(self)
        try:
            output = await self.definition.fn(ctx, self.run.input)
            if self.diverged is not None:
                raise self.diverged
            value = normalise(output, f"output of workflow {self.run.workflow!r}")
            return Settlement(RunStatus.COMPLETED, value), False
        except NewerCode as newer:
            log.warning("%s; left for an engine that has it", newer)
            self.wake_by(self.now() + timedelta(seconds=NEWER_CODE_RETRY))
            return None
        except Suspend:
            if self.diverged is not None:
                return Settlement(RunStatus.FAILED, None, error_dict(self.diverged)), False
            return None
        except ContinueAsNew as cont:
            return await self.continued(cont.input), False
        except Cancelling:
            return Settlement(RunStatus.CANCELLED), True
        except Exception as exc:
            failure = self.diverged or exc
            return Settlement(RunStatus.FAILED, None, error_dict(failure)), False

    async def continued(self, input: JSON) -> Settlement:
        """The settlement of a run that continues as new with ``input``."""
        spec = await self.host.continuation_spec(self.run, input)
        return Settlement(RunStatus.COMPLETED, {"continued_as": spec.id}, None, spec)

    async def _suspend(self) -> TurnOutcome:
        wake = min(self.wakes) if self.wakes else None
        try:
            rewake = await self._suspend_writes(wake)
        except RunCancelling:
            return await self._finish(Settlement(RunStatus.CANCELLED), discard=True)
        except LeaseLostError:
            return TurnOutcome("abandoned")
        return TurnOutcome("rewake" if rewake else "suspended", wake_at=wake)

    async def _suspend_writes(self, wake: datetime | None) -> bool:
        """The writes of a suspension (the attributes set, the slots of the steps recorded,
        then the suspension with what is staged); whether the run is due again at once."""
        attributes = self._attributes_call()
        if attributes is not None:
            await self._write(*attributes)
        if self.unreleased:
            self.host.wake(await self._write(*self._release_call()))
        writes = replace(self._take_writes(), events=tuple(self.awaited))
        suspend = self.host.store.suspend_run(
            self.run.id, self.owner, writes, wake, self.now(), blocked=self.denied
        )
        return await self._write(writes, suspend)

    async def _finish(self, settlement: Settlement, discard: bool = False) -> TurnOutcome:
        attributes = None if discard else self._attributes_call()
        if attributes is not None:
            try:
                await self._write(*attributes)
            except RunCancelling:
                return await self._finish(Settlement(RunStatus.CANCELLED), discard=True)
            except LeaseLostError:
                return TurnOutcome("abandoned")
        settlement = await self._with_handler(settlement)
        writes = Writes() if discard else self._take_writes()
        if settlement.status == RunStatus.CANCELLED and settlement.error is None:
            current = await self.io(self.host.store.get_run(self.run.id))
            settlement = Settlement(RunStatus.CANCELLED, None, current.error if current else None)
        now = self.now()
        # The slot this run frees can go straight to the next waiter, leased to this engine.
        successor = self.host.successor_lease() if self.run.holds_slot else None
        # A queued run's settlement releases every slot it holds (the unreleased ones too).
        freed = self._take_unreleased()
        settle = self.host.store.settle_run(
            self.run.id,
            self.owner,
            writes,
            settlement,
            now,
            successor=successor,
            queued=self.queued,
            keyed=self.run.singleton_key is not None,
        )
        try:
            result = await self._write(writes, settle, freed)
        except RunCancelling:
            return await self._finish(Settlement(RunStatus.CANCELLED), discard=True)
        except LeaseLostError:
            return TurnOutcome("abandoned")
        settled = settled_run(self.run, settlement, now)
        refusal = result.handler.rejected if result.handler is not None else None
        if refusal is not None:
            log.warning("run %s: its failure handler's start was refused: %s", self.run.id, refusal)
            settled = replace(settled, error=with_handler_error(settled.error, refusal))
        return TurnOutcome(
            "settled",
            woken=result.woken,
            status=settlement.status,
            settled=settled,
            successor=result.successor,
        )

    async def _with_handler(self, settlement: Settlement) -> Settlement:
        """A failed or dead settlement with its failure handler's run to create, if the workflow
        names one; when that start cannot even be built (its gate's key callable raised, say),
        the run records why in ``error["handler_error"]`` and settles all the same."""
        workflow = self.definition.handler(settlement.status)
        if workflow is None:
            return settlement
        try:
            spec = await self.io(self.host.handler_spec(workflow, self.run, settlement))
        except Exception as exc:
            log.warning("run %s: failure handler %s cannot start: %s", self.run.id, workflow, exc)
            return replace(settlement, error=with_handler_error(settlement.error, exc))
        return replace(settlement, handler=spec)

    async def _release(self, outage: BaseException) -> TurnOutcome:
        """Give the run back after a store outage: suspended and due now, with the records this
        turn made that may not have been written (a remote step's dispatch mark aside: its task
        was never sent). If the store cannot take this either, the outcome carries what to
        give back once it answers again (see ``releases``).

        The write is fenced like any other: when an earlier write whose outcome was unknown did
        commit a settlement, this one finds the lease gone and changes nothing.
        """
        writes = self._take_writes()
        steps = tuple(r for r in writes.steps if r.status != StepStatus.RUNNING)
        run = Unreleased(
            self.run.id,
            self.owner,
            Writes(steps, writes.consumed_signals),
            tuple(self._take_unreleased()),
        )
        unreleased = None
        try:
            await give_back(self.host.store, run, self.now())
        except RunCancelling:
            try:
                return await self._finish(Settlement(RunStatus.CANCELLED), discard=True)
            except Abandon:
                pass
        except LeaseLostError:
            pass
        except Exception as exc:
            if not is_infrastructure(exc):
                raise
            unreleased = run  # the engine gives it back once the store answers
        log.debug("run %s: turn abandoned, the store is unavailable (%s)", self.run.id, outage)
        return TurnOutcome("abandoned", outage=outage, unreleased=unreleased)
