"""Remote steps: dispatch to a worker group, and take results and heartbeats back.

A remote step's attempt is recorded ``running`` (a checkpoint) before its task is sent, so a
result can always be matched to it. Without a ``timeout`` the run then suspends durably and the
result, taken by whichever instance consumes it, is written with ``record_step_result`` and wakes
the run. With a ``timeout`` the turn waits in memory. The liveness window starts when a worker
takes the task (its first heartbeat, sent the moment it starts): time spent queued behind busy
workers is not counted, and a task nobody takes is re-sent after ``remote_redispatch`` (else
``reconcile_interval``) seconds. Once taken, heartbeats re-arm the window; when it runs out, the
checkpoint is read again before anything is declared dead.

Each dispatch carries the fence of the turn that sends it (``fences``), recorded on the attempt;
a turn sends a step at most once, so a re-send of a task this turn sent already ends the turn
(due at once) and the claim that follows sends it under the next fence. A result or a beat of an
older fence than the record's is a stale execution's: dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from .errors import Abandon, Cancelled, StepTimeoutError, error_dict, is_fatal, raise_stored
from .faults import OutageLog, is_infrastructure
from .fences import fence_of
from .models import JSON, RunStatus, Settled, StepKind, StepRecord, StepStatus, older_fence
from .routing import Reason
from .runqueue import RateLimitedLog
from .stores.base import Store
from .transports.base import Message, Transport
from .transports.messages import PROTOCOL, WORKER_KIND, Malformed, check
from .workflow_tasks import DECISION_KIND, WORKFLOW_KIND

if TYPE_CHECKING:
    from .context import StepOp
    from .options import EngineOptions
    from .remote_turns import RemoteTurns
    from .turn import Turn

log = logging.getLogger(__name__)

Key = tuple[str, int]  # (step id, attempt)
RESULT_BATCH = 64
STOP_TIMEOUT = 5.0  # a consumer stuck in a driver call is left behind rather than waited on
TAKE_TIMEOUT = 1.0
OUTAGE_PAUSE_MAX = 5.0  # seconds between tries to record held results while the store is down


def step_id(run_id: str, seq: int) -> str:
    return f"{run_id}:{seq}"


class RemoteHost(Protocol):
    """What remote steps need of the instance that consumes their results and beats."""

    @property
    def store(self) -> Store: ...

    @property
    def options(self) -> EngineOptions: ...

    @property
    def outage(self) -> OutageLog:
        """Where a result or a beat the store could not take is reported."""
        ...

    @property
    def remote_turns(self) -> RemoteTurns | None:
        """Where a remote workflow's decisions and beats go."""
        ...

    def decision_queues(self) -> list[str]:
        """The decision queues of the remote workflows this instance serves (whose decisions
        it applies); none when it serves no remote workflow."""
        ...

    @property
    def has_queues(self) -> bool:
        """Whether step queues are registered (a recorded result may free a slot)."""
        ...

    def now(self) -> datetime: ...

    def send(self, run_ids: Iterable[str], reason: Reason) -> None:
        """Runs made due in the store: have them executed (see ``routing``)."""
        ...

    def poll_soon(self) -> None:
        """Look for due work now rather than at the next poll interval."""
        ...


class RemoteSteps:
    """One engine's side of remote steps: dispatches, in-memory waiters, results and beats."""

    def __init__(self, host: RemoteHost, transport: Transport) -> None:
        self.host = host
        self.transport = transport
        self._waiters: dict[Key, asyncio.Future[Message]] = {}
        self._awaited: dict[Key, StepRecord] = {}  # the dispatch each waiter awaits (its fence)
        self._heard: dict[Key, float] = {}  # monotonic time of the last beat heard, per waiter
        # When (by the engine's clock) the last beat of a waiter's attempt was heard here: a
        # worker took its task. Compared with a beat another instance persisted.
        self._beats: dict[Key, datetime] = {}
        # Monotonic time a beat was last written, per dispatch (a beat of another dispatch of the
        # same attempt, a stale one among them, must not hold back this one's).
        self._persisted: dict[tuple[Key, int | None], float] = {}
        self.workers: dict[str, Message] = {}  # descriptors of the workers heard announcing
        self._tasks: list[asyncio.Task[None]] = []
        # Results and decisions taken off the transport that the store could not record yet
        # (an outage), each consumer's own.
        self._unlanded: list[Message] = []
        self._undecided: list[Message] = []
        self._failures = RateLimitedLog()
        # Loops check this too: a cancel landing inside a driver call can surface as that
        # driver's own error, and a loop that retries on errors would then never end.
        self._stopping = False

    def start(self) -> None:
        self._stopping = False
        if not self._tasks:
            results = self.transport.take_results
            self._tasks = [
                asyncio.create_task(self._consume(results, self._unlanded), name="runlane-results"),
                asyncio.create_task(self._hear_beats(), name="runlane-heartbeats"),
            ]
            queues = self.host.decision_queues()
            if queues:
                decisions = functools.partial(self.transport.take_decisions, queues)
                self._tasks.append(
                    asyncio.create_task(
                        self._consume(decisions, self._undecided), name="runlane-decisions"
                    )
                )

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT)
        self._tasks = []
        await self._hand_back_unlanded()

    async def _hand_back_unlanded(self) -> None:
        """Results and decisions still held for an unreachable store go back to the transport
        for another instance (or this one, later) to record; one that cannot leaves its attempt
        to the step's redispatch rules (a decision: to its turn's silence window). A decision
        goes back to the results queue, which every instance takes: one that serves its code
        applies it, any other drops it."""
        held = [*self._unlanded, *self._undecided]
        self._unlanded.clear()
        self._undecided.clear()
        for result in held:
            try:
                await self.transport.send_result(result)
            except Exception as exc:
                self._failures.warning("handing back result %s failed (%s)", result, exc)

    # ---------------------------------------------------------------- dispatch and waiting

    async def dispatch(self, group: str, task: Message) -> None:
        try:
            await self.transport.send_tasks(group, [task])
        except Exception as exc:
            # The attempt is recorded running; redispatch or reconcile re-sends it.
            self._failures.warning("dispatching %s failed (%s)", task.get("step_id"), exc)

    @contextlib.contextmanager
    def expecting(self, key: Key, record: StepRecord) -> Iterator[asyncio.Future[Message]]:
        """A future for the result of the attempt's dispatch ``record``, and its beats heard,
        while the block runs."""
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiters[key] = future
        self._awaited[key] = record
        self._heard[key] = time.monotonic()
        try:
            yield future
        finally:
            self._waiters.pop(key, None)
            self._awaited.pop(key, None)
            self._heard.pop(key, None)
            self._beats.pop(key, None)

    def expect_dispatch(self, key: Key, record: StepRecord) -> None:
        """The awaited attempt was sent again (``record``): what its earlier dispatches send
        back is stale from now on."""
        if key in self._awaited:
            self._awaited[key] = record

    def _stale(self, message: Message) -> bool:
        """A result or beat of an awaited attempt sent by an older dispatch than the awaited one."""
        awaited = self._awaited.get(_key(message))
        return awaited is not None and older_fence(fence_of(message), awaited)

    def interrupt(self, run_ids: Iterable[str]) -> None:
        """Runs this instance cancelled: their turns waiting here in memory for a remote step
        stop waiting and end the run cancelled (the step's result, if it ever comes, is
        dropped with the run). Without this a cancelled run waited for its step, and for ever
        when no worker took the task."""
        cancelled = set(run_ids)
        for key, waiter in self._waiters.items():
            if _run_of(key) in cancelled and not waiter.done():
                waiter.set_exception(Cancelled())

    def heard_at(self, key: Key) -> float:
        return self._heard.get(key, 0.0)

    def taken(self, key: Key) -> bool:
        """A worker took the awaited attempt's task: one of its beats was heard here."""
        return key in self._beats

    def last_beat(self, key: Key) -> datetime | None:
        """When the awaited attempt's last beat was heard here, by the engine's clock."""
        return self._beats.get(key)

    # ---------------------------------------------------------------- consumers

    async def _consume(
        self, take: Callable[[int, float], Awaitable[list[Message]]], held: list[Message]
    ) -> None:
        """Take results (or decisions) and land them; ``held`` keeps what an outage left
        unlanded."""
        most = self._held_pause()
        pause = min(TAKE_TIMEOUT, most)
        while not self._stopping:
            if held:
                # The store was unreachable: record what is held before taking more, which
                # stays on the transport meanwhile.
                held[:] = await self._land_all(held)
                if held:
                    await asyncio.sleep(pause)
                    pause = min(most, pause * 2)
                    continue
                pause = min(TAKE_TIMEOUT, most)
            try:
                messages = await take(RESULT_BATCH, TAKE_TIMEOUT)
            except Exception as exc:
                if self._stopping:
                    return
                self._failures.warning("taking step results failed (%s); retrying", exc)
                await asyncio.sleep(TAKE_TIMEOUT)
                continue
            held[:] = await self._land_all(messages)

    def _held_pause(self) -> float:
        """The longest pause between two tries to land what an outage held: at most a third of
        the redispatch window. A store that flaps (reconnects failing and succeeding) lets the
        turns' writes through now and then; a result held through a longer pause misses the
        window, and the turn that finds its step silent sends it again (the step executes once
        more per window missed: RELIABILITY.md, "seen once")."""
        return min(OUTAGE_PAUSE_MAX, _redispatch_window(self.host.options) / 3)

    async def _land_all(self, results: list[Message]) -> list[Message]:
        """Land results; the ones the store could not record (an outage) come back, held."""
        held: list[Message] = []
        for raw in results:
            if isinstance(raw, dict) and raw.get("kind") == DECISION_KIND:
                if not await self._land_decision(raw):
                    held.append(raw)
                continue
            try:
                result = check("result", raw)
            except Malformed as exc:
                self._failures.warning("dropping a malformed step result: %s", exc)
                continue
            if held and not self._waited(result):
                held.append(result)  # the store just failed: don't wait on it for each one
                continue
            try:
                await self._land(result)
            except Exception as exc:
                if is_infrastructure(exc):
                    self.host.outage.failed(exc, "recording a remote step's result")
                    held.append(result)
                else:
                    self._failures.warning(
                        "landing result %s failed (%s)", result.get("step_id"), exc
                    )
        return held

    async def _land_decision(self, decision: Message) -> bool:
        """Apply a remote workflow turn's decision; False when the store is unreachable."""
        turns = self.host.remote_turns
        try:
            if turns is not None:
                await turns.land(decision)
        except Exception as exc:
            if not is_infrastructure(exc):
                self._failures.warning("applying decision %s failed (%s)", decision, exc)
                return True
            self.host.outage.failed(exc, "applying a remote workflow's decision")
            return False
        return True

    def _waited(self, result: Message) -> bool:
        """Whether a turn here waits for this result in memory (landing it needs no store)."""
        return _key(result) in self._waiters

    async def _land(self, result: Message) -> None:
        key = _key(result)
        if self._stale(result):
            log.info("dropping a result of %s from a dispatch sent again since", key[0])
            return
        waiter = self._waiters.get(key)
        if waiter is not None and not waiter.done():
            waiter.set_result(result)
            return
        run_id, seq = str(result.get("run_id")), int(result.get("seq") or 0)
        outcome = await self.host.store.record_step_result(
            run_id,
            seq,
            key[1],
            bool(result.get("ok")),
            result.get("output"),
            result.get("error"),
            self.host.now(),
            fence=fence_of(result),
        )
        if outcome != "dropped":
            # The run resumes where its result landed, when this instance has room for it.
            self.host.send([run_id], Reason.LANDED)
        if outcome == "recorded" and self.host.has_queues:
            # A queued step's slot was freed in that write, and its next waiters made due: the
            # loop's next pass (now, not a poll interval later) hands them out.
            self.host.poll_soon()

    async def _hear_beats(self) -> None:
        while not self._stopping:
            try:
                async with self.transport.heartbeats() as feed:
                    async for raw in feed:
                        if isinstance(raw, dict) and raw.get("kind") == WORKFLOW_KIND:
                            if self.host.remote_turns is not None:
                                await self.host.remote_turns.heard_beat(raw)
                            continue
                        if isinstance(raw, dict) and raw.get("kind") == WORKER_KIND:
                            self._met(raw)
                            continue
                        try:
                            beat = check("heartbeat", raw)
                        except Malformed as exc:
                            self._failures.warning("dropping a malformed heartbeat: %s", exc)
                            continue
                        await self._heard_beat(beat)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopping:
                    return
                self._failures.warning("heartbeat feed failed (%s); resubscribing", exc)
                await asyncio.sleep(TAKE_TIMEOUT)

    def _met(self, raw: Message) -> None:
        """A worker announced itself: remember it, or say why it cannot work with this engine."""
        try:
            descriptor = check(WORKER_KIND, raw)
        except Malformed as exc:
            log.warning("worker %r cannot work with this engine: %s", raw.get("worker"), exc)
            return
        self.workers[str(descriptor["worker"])] = descriptor
        log.info(
            "worker %s joined group %s (protocol %s)",
            descriptor["worker"],
            descriptor["group"],
            descriptor.get("protocol", PROTOCOL),
        )

    async def _heard_beat(self, beat: Message) -> None:
        key = _key(beat)
        if self._stale(beat):
            return  # a stale execution's: it says nothing of the dispatch awaited
        if key in self._waiters:
            self._heard[key] = time.monotonic()
            self._beats[key] = self.host.now()
            return
        throttle = persist_throttle(self.host.options)
        dispatch = (key, fence_of(beat))
        if time.monotonic() - self._persisted.get(dispatch, -throttle) < throttle:
            return
        self._persisted[dispatch] = time.monotonic()
        if len(self._persisted) > 10_000:
            self._persisted.clear()
        try:
            await self.host.store.record_heartbeat(
                str(beat.get("run_id")),
                int(beat.get("seq") or 0),
                key[1],
                self.host.now(),
                fence=fence_of(beat),
            )
        except Exception as exc:
            # The worker's next beat is persisted instead; if the store stays away longer than
            # the attempt's window, the attempt falls silent and its retry rules apply.
            del self._persisted[dispatch]
            if not is_infrastructure(exc):
                raise
            self.host.outage.failed(exc, "recording a heartbeat")


def _key(message: Message) -> Key:
    return (str(message.get("step_id")), int(message.get("attempt") or 0))


def _run_of(key: Key) -> str:
    return key[0].rsplit(":", 1)[0]  # a step id is "<run id>:<seq>"


# ---------------------------------------------------------------- the turn's side


async def settle_remote_step(turn: Turn, op: StepOp, remote: RemoteSteps) -> Settled | None:
    """Run or replay one remote step; None means the run suspends (durably) for now."""
    record = turn.recorded(op.seq, StepKind.STEP, op.name)
    if record is not None and record.status == StepStatus.COMPLETED:
        return Settled(True, record.output)
    if record is not None and record.status == StepStatus.FAILED:
        return Settled(False, None, record.error)
    if record is not None and record.status == StepStatus.RUNNING:
        return await _in_flight(turn, op, remote, record)
    if record is not None and record.error is not None and record.wake_at is None:
        return _attempt_failed(turn, op, record, record.error)
    if record is not None and record.wake_at is not None and record.wake_at > turn.now():
        turn.wake_by(record.wake_at)
        return None
    if op.definition.queue is not None and not await turn.admit(op):
        return None  # its queue admits it later; the slot is held until its result is recorded
    return await _dispatch(turn, op, remote, record, (record.attempts if record else 0) + 1)


async def _dispatch(
    turn: Turn, op: StepOp, remote: RemoteSteps, prior: StepRecord | None, attempt: int
) -> Settled | None:
    now = turn.now()
    record = _running(turn, op, prior, attempt, dispatches=1, started=now)
    turn.stage(record)
    await turn.flush()  # the attempt is durable before any worker can answer it
    return await _send_and_wait(turn, op, remote, record)


def _running(
    turn: Turn,
    op: StepOp,
    prior: StepRecord | None,
    attempt: int,
    *,
    dispatches: int,
    started: datetime,
) -> StepRecord:
    return StepRecord(
        run_id=turn.run.id,
        seq=op.seq,
        name=op.name,
        kind=StepKind.STEP,
        status=StepStatus.RUNNING,
        input=op.input,
        attempts=attempt,
        started_at=started,
        last_heartbeat_at=prior.last_heartbeat_at if prior and prior.attempts == attempt else None,
        wake_at=_next_check(turn, op, started),
        dispatches=dispatches,
        fence=turn.fence,
    )


def _next_check(turn: Turn, op: StepOp, since: datetime) -> datetime:
    options = turn.host.options
    window = _redispatch_window(options)
    return since + timedelta(seconds=min(window, options.reconcile_interval))


def _redispatch_window(options: EngineOptions) -> float:
    """Seconds after which a dispatch nobody answered may have been lost, and is sent again."""
    return options.remote_redispatch or options.reconcile_interval


def persist_throttle(options: EngineOptions) -> float:
    """Seconds between two beats of one attempt an instance persists: the
    ``heartbeat_persist_throttle``, but at most a third of the redispatch window. A turn judges
    a step without ``timeout`` silent by the beat persisted last, which lags the last one heard
    by up to this much: a throttle as long as the window (10 s against a ``remote_redispatch``
    of 3) had a step whose worker was beating all along sent again after the window."""
    return min(options.heartbeat_persist_throttle, _redispatch_window(options) / 3)


def _out_of_dispatches(options: EngineOptions, record: StepRecord) -> bool:
    limit = options.remote_redispatch_max
    return limit is not None and record.dispatches > limit


class _SendAgain(Exception):
    """A task this turn sent already is to be sent again: it needs a newer fence than this
    turn's, so the turn ends (due at once) and the next claim of the run sends it."""


def _sent_by(turn: Turn, record: StepRecord) -> bool:
    """Whether ``record``'s dispatch went out under this turn's fence (this turn sent it)."""
    return record.fence is not None and record.fence >= turn.fence


async def _redispatched(turn: Turn, op: StepOp, record: StepRecord) -> StepRecord:
    """The same attempt recorded as sent once more, durably before it is sent, under this
    turn's fence; ``_SendAgain`` when this turn sent it already (a step is sent at most once
    under a fence)."""
    if _sent_by(turn, record):
        raise _SendAgain()
    again = _running(
        turn, op, record, record.attempts, dispatches=record.dispatches + 1, started=turn.now()
    )
    turn.stage(again)
    await turn.flush()
    return again


def _task(turn: Turn, op: StepOp, record: StepRecord) -> Message:
    trace = turn.host.tracing.carrier()
    return {
        **({"trace": trace} if trace else {}),
        "protocol": PROTOCOL,
        "step_id": step_id(turn.run.id, op.seq),
        "run_id": turn.run.id,
        "seq": op.seq,
        "name": op.name,
        "group": op.definition.group,
        "input": op.input,
        "attempt": record.attempts,
        "fence": record.fence,
        "dispatched_at": turn.now().isoformat(),
    }


async def _send(turn: Turn, op: StepOp, remote: RemoteSteps, record: StepRecord) -> None:
    """Send the attempt's task to its group. A task is sent like a step starts: an engine
    frozen between the checkpoint that records the attempt as sent and the send, past its
    lease, must not send it once its run was taken over (and perhaps settled): a worker would
    run the step again, late."""
    await turn.ensure_lease()
    await remote.dispatch(str(op.definition.group), _task(turn, op, record))


async def _send_and_wait(
    turn: Turn, op: StepOp, remote: RemoteSteps, record: StepRecord
) -> Settled | None:
    timeout = op.definition.timeout
    if timeout is None:
        await _send(turn, op, remote, record)
        turn.wake_by(record.wake_at or turn.now())
        return None
    first = min(timeout, _redispatch_window(turn.host.options))
    return await _watched(turn, op, remote, record, timeout, first=first, send=True)


async def _watched(
    turn: Turn,
    op: StepOp,
    remote: RemoteSteps,
    record: StepRecord,
    timeout: float,
    *,
    first: float,
    send: bool = False,
) -> Settled | None:
    """Wait in memory for an attempt's result (sending its task first when ``send``)."""
    watch = _Watch(turn, op, remote, record, timeout)
    try:
        # Expect before sending: the beat a worker sends as it takes the task must not be missed.
        with remote.expecting(watch.key, record) as waiter:
            if send:
                await watch.send()
            result = await watch.result(waiter, first)
    except _SendAgain:
        turn.wake_by(turn.now())
        return None
    return _resolve(turn, op, watch.record, result)


class _Watch:
    """The in-memory wait for one attempt of a remote step with a ``timeout``.

    Until a worker takes the task (a beat heard here, or persisted by another instance for this
    attempt) it is only queued and the liveness window does not run: the checkpoint is read every
    ``timeout`` seconds, and the task is re-sent when nobody took it for the redispatch window.
    Once it is taken, silence longer than ``timeout`` everywhere ends the wait.
    """

    def __init__(
        self, turn: Turn, op: StepOp, remote: RemoteSteps, record: StepRecord, timeout: float
    ) -> None:
        self.turn = turn
        self.op = op
        self.remote = remote
        self.record = record  # a re-send replaces it (one more dispatch of the same attempt)
        self.timeout = timeout
        self.key = (step_id(turn.run.id, op.seq), record.attempts)

    async def send(self) -> None:
        await _send(self.turn, self.op, self.remote, self.record)

    async def result(self, waiter: asyncio.Future[Message], first: float) -> Message | None:
        """The worker's (or the checkpoint's) result; None when the worker fell silent.

        Each time the wait runs out the checkpoint is read first: a result another instance
        recorded ends the wait even while beats keep it going, and so does a cancellation made
        elsewhere (one made here interrupts the wait at once: ``RemoteSteps.interrupt``).
        """
        wait = first
        while True:
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(waiter), wait)
            stored = await self.turn.io(
                self.turn.host.store.get_step(self.turn.run.id, self.op.seq)
            )
            if stored is not None and stored.status != StepStatus.RUNNING:
                return _stored_result(stored)
            if waiter.done():  # it landed while the checkpoint was read
                return waiter.result()
            await self._still_ours()
            if self._taken(stored):
                wait = self._alive_for(stored)
                if wait <= 0:
                    return None
            else:
                queued = await self._queued()
                if queued is None:
                    return self._not_taken()
                wait = queued

    async def _still_ours(self) -> None:
        """Waiting on is pointless for a run cancelled meanwhile (it settles cancelled now) or
        taken over by another instance (this turn's writes would be refused)."""
        turn = self.turn
        run = await turn.io(turn.host.store.get_run(turn.run.id))
        if run is None or run.lease_owner != turn.owner:
            raise Abandon()
        if run.status == RunStatus.CANCELLING:
            raise Cancelled()

    def _taken(self, stored: StepRecord | None) -> bool:
        if self.remote.taken(self.key):
            return True
        return (
            stored is not None
            and stored.attempts == self.record.attempts
            and stored.last_heartbeat_at is not None
        )

    def _alive_for(self, stored: StepRecord | None) -> float:
        """Seconds of silence the worker still has, from beats heard here or persisted elsewhere."""
        heard = self.remote.heard_at(self.key) + self.timeout - time.monotonic()
        missed = not _heard_here(self.remote.last_beat(self.key), stored)
        return max(heard, _persisted_grace(self.turn, stored, self.timeout, allowance=missed))

    async def _queued(self) -> float | None:
        """Seconds until a task nobody took is looked at again (re-sent if due); None: give up."""
        options = self.turn.host.options
        window = _redispatch_window(options)
        due = window - _since(self.turn, self.record.started_at)
        if due <= 0:
            if _out_of_dispatches(options, self.record):
                return None
            self.record = await _redispatched(self.turn, self.op, self.record)
            self.remote.expect_dispatch(self.key, self.record)
            await self.send()
            due = window
        return min(self.timeout, due)

    def _not_taken(self) -> Message:
        error = StepTimeoutError(
            f"no worker took remote step {self.op.name!r} after {self.record.dispatches} dispatches"
        )
        return {"ok": False, "error": error_dict(error, with_traceback=False)}


def _stored_result(stored: StepRecord) -> Message:
    return {
        "ok": stored.status == StepStatus.COMPLETED,
        "output": stored.output,
        "error": stored.error,
    }


SAME_BEAT = 0.5
"""Seconds within which two instances stamp one broadcast beat (delivery and clock skew
between them): a beat persisted no later than this after the last beat heard here is one this
instance heard too."""


def _heard_here(last: datetime | None, stored: StepRecord | None) -> bool:
    """Whether the last beat persisted for the attempt (if any) was heard here as well."""
    if stored is None or stored.last_heartbeat_at is None:
        return True
    return last is not None and stored.last_heartbeat_at <= last + timedelta(seconds=SAME_BEAT)


def _persisted_grace(
    turn: Turn, stored: StepRecord | None, timeout: float, *, allowance: bool
) -> float:
    """Seconds of silence still allowed because another instance persisted a recent beat.

    That instance persists at most one beat per ``persist_throttle``: a worker beating
    all along may have been heard that long after the last persisted beat, so a dispatcher that
    did not hear that beat itself allows one throttle more (seed 003, rule 3). A dispatcher that
    heard it (every instance hears every beat) gets no ``allowance``: it knows the worker's last
    sign of life itself, and a dead worker is detected within ``timeout``.
    """
    if stored is None or stored.last_heartbeat_at is None:
        return 0.0
    window = timeout + (persist_throttle(turn.host.options) if allowance else 0.0)
    return window - (turn.now() - stored.last_heartbeat_at).total_seconds()


def _resolve(turn: Turn, op: StepOp, record: StepRecord, result: Message | None) -> Settled | None:
    if result is None:
        error = error_dict(
            StepTimeoutError(
                f"remote step {op.name!r} sent no result or heartbeat for {op.definition.timeout}s"
            )
        )
        return _attempt_failed(turn, op, record, error)
    if result.get("ok"):
        output: JSON = result.get("output")
        turn.complete(
            op.seq,
            StepKind.STEP,
            op.name,
            output,
            record,
            input=op.input,
            attempts=record.attempts,
            fence=record.fence,
        )
        return Settled(True, output)
    return _attempt_failed(turn, op, record, dict(result.get("error") or {}))


def _attempt_failed(
    turn: Turn, op: StepOp, record: StepRecord, error: dict[str, Any]
) -> Settled | None:
    retry_in = op.retry.retry_in(record.attempts, is_fatal(error))
    if retry_in is not None:
        wake = turn.now() + timedelta(seconds=retry_in)
        turn.stage(_pending_retry(record, error, wake, turn.now()))
        turn.wake_by(wake)
        return None
    turn.stage(_failed(record, error, turn.now()))
    turn.keep_error(op.seq, raise_stored(error))
    return Settled(False, None, error)


def _pending_retry(
    record: StepRecord, error: dict[str, Any], wake: datetime, now: datetime
) -> StepRecord:
    return replace(record, status=StepStatus.PENDING, error=error, wake_at=wake, finished_at=now)


def _failed(record: StepRecord, error: dict[str, Any], now: datetime) -> StepRecord:
    return replace(record, status=StepStatus.FAILED, error=error, wake_at=None, finished_at=now)


async def _in_flight(
    turn: Turn, op: StepOp, remote: RemoteSteps, record: StepRecord
) -> Settled | None:
    """A dispatched attempt with no result yet (this turn was woken, or another instance died)."""
    timeout = op.definition.timeout
    if timeout is not None:
        return await _watch_again(turn, op, remote, record, timeout)
    options = turn.host.options
    last = _last_sign(turn, record)
    silent = _since(turn, last)
    window = options.remote_redispatch
    if window is None or silent < window:
        # Looked at again when the attempt may be re-sent, and never later than the reconcile
        # interval (every recheck, not only the first).
        wake = _next_check(turn, op, turn.now())
        if window is not None:
            wake = min(wake, last + timedelta(seconds=window))
        turn.wake_by(wake)
        return None
    if _out_of_dispatches(options, record):
        return _attempt_failed(turn, op, record, _timed_out(op, silent))
    try:
        again = await _redispatched(turn, op, record)
    except _SendAgain:
        turn.wake_by(turn.now())
        return None
    return await _send_and_wait(turn, op, remote, again)


async def _watch_again(
    turn: Turn, op: StepOp, remote: RemoteSteps, record: StepRecord, timeout: float
) -> Settled | None:
    """Keep watching an attempt another turn sent (its instance is gone)."""
    if record.last_heartbeat_at is None:
        # No worker took it yet as far as anyone recorded: queued time is not silence, so the
        # rules for an untaken task apply, counted from its last dispatch.
        return await _watched(turn, op, remote, record, timeout, first=0.0)
    silent = _since(turn, _last_sign(turn, record))
    if silent >= timeout:
        return _attempt_failed(turn, op, record, _timed_out(op, silent))
    return await _watched(turn, op, remote, record, timeout, first=timeout - silent)


def _since(turn: Turn, at: datetime | None) -> float:
    return (turn.now() - at).total_seconds() if at is not None else 0.0


def _last_sign(turn: Turn, record: StepRecord) -> datetime:
    """When the attempt was last sent, or last heard from (a beat another instance persisted)."""
    sent = record.started_at or turn.now()
    return max(sent, record.last_heartbeat_at or sent)


def _timed_out(op: StepOp, silent: float) -> dict[str, Any]:
    return error_dict(
        StepTimeoutError(f"remote step {op.name!r} silent for {silent:.1f}s"), with_traceback=False
    )
