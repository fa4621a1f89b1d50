"""Remote steps on the engine's side of the wire: tasks sent to a worker group, and the results,
heartbeats and decisions taken back (the turn's side is ``steps``).

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
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from ..errors import Cancelling
from ..faults import OutageLog, RateLimitedLog, is_infrastructure
from ..fences import fence_of
from ..models import StepRecord, older_fence
from ..routing import Reason
from ..stores.base import Store
from ..transports.base import Message, Transport
from ..transports.messages import PROTOCOL, WORKER_KIND, Malformed, check
from .tasks import DECISION_KIND, WORKFLOW_KIND

if TYPE_CHECKING:
    from ..options import EngineOptions
    from .turns import RemoteTurns

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


class RemoteDispatch:
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
        self._failures = RateLimitedLog(log)
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
                waiter.set_exception(Cancelling())

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
        return min(OUTAGE_PAUSE_MAX, redispatch_window(self.host.options) / 3)

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


def redispatch_window(options: EngineOptions) -> float:
    """Seconds after which a dispatch nobody answered may have been lost, and is sent again."""
    return options.remote_redispatch or options.reconcile_interval


def persist_throttle(options: EngineOptions) -> float:
    """Seconds between two beats of one attempt an instance persists: the
    ``heartbeat_persist_throttle``, but at most a third of the redispatch window. A turn judges
    a step without ``timeout`` silent by the beat persisted last, which lags the last one heard
    by up to this much: a throttle as long as the window (10 s against a ``remote_redispatch``
    of 3) had a step whose worker was beating all along sent again after the window."""
    return min(options.heartbeat_persist_throttle, redispatch_window(options) / 3)
