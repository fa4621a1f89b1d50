"""The run queue: how starts and wakes reach whichever instance takes them.

With a transport that has a run queue (db, redis), an engine sends every start and wake as a
run message instead of executing it itself, and consumes messages from the queue like every
other driving instance. The store stays the truth: the claim decides whether a message still
means anything, so a duplicate costs one claim and a lost message costs one poll interval.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Collection, Iterable
from typing import Protocol

from .faults import RateLimitedLog
from .models import Run, Serves
from .options import EngineOptions
from .routing import Reason
from .stores.base import Store
from .transports.addresses import code
from .transports.base import Message, Transport
from .transports.messages import PROTOCOL, Malformed, check

log = logging.getLogger(__name__)

SEND_RETRY_DELAYS = (0.25, 1.0, 4.0)
TAKE_TIMEOUT = 1.0


@functools.lru_cache(maxsize=16)
def codes_of(serves: Serves) -> list[str]:
    """The codes (``addresses.code``) of the pairs an instance serves: its run queues."""
    return [code(*pair) for pair in sorted(serves.pairs)]


def message(run: Run, reason: str) -> Message:
    return {
        "protocol": PROTOCOL,
        "run_id": run.id,
        "namespace": run.namespace,
        "workflow": run.workflow,
        "version": run.version,
        "priority": run.priority,
        "reason": reason,
    }


class RunSink(Protocol):
    """What the run queue needs of the instance it serves: where taken runs go, and its room."""

    @property
    def store(self) -> Store: ...

    @property
    def options(self) -> EngineOptions: ...

    @property
    def namespace(self) -> str | None:
        """The namespace whose runs are consumed (None: every namespace)."""
        ...

    @property
    def serves(self) -> Serves:
        """The codes whose runs are consumed (those the instance can replay)."""
        ...

    def room(self) -> int:
        """How many more turns can start here now."""
        ...

    async def room_freed(self) -> None:
        """Return once a turn here has ended."""
        ...

    def take(self, run_id: str, *, handoff: bool) -> None:
        """Execute a run taken off the queue (``handoff``: a handed-off timer's message)."""
        ...

    def send(self, run_ids: Iterable[str], reason: Reason) -> None:
        """Runs made due in the store: have them executed (see ``routing``)."""
        ...


class RunQueue:
    """Publishes an engine's starts and wakes in batches, and consumes its namespace's queue."""

    def __init__(self, sink: RunSink, transport: Transport) -> None:
        self.sink = sink
        self.transport = transport
        self._starts: dict[str, Message] = {}
        self._wakes: set[str] = set()
        self._flush: asyncio.Task[None] | None = None
        self._consumer: asyncio.Task[None] | None = None
        self._failures = RateLimitedLog(log)
        self._pending_timer_messages: dict[str, Message] = {}
        self.taken: dict[str, Message] = {}  # taken from the queue, not yet claimed
        self.handed_back: set[str] = set()
        self._claimed = asyncio.Event()  # an id left ``taken``: the prefetch has room again
        self._stopping = False

    # ---------------------------------------------------------------- publishing

    def publish_starts(self, runs: Iterable[Run]) -> None:
        for run in runs:
            self._starts[run.id] = message(run, "start")
        self._schedule()

    def publish_wakes(self, run_ids: Iterable[str]) -> None:
        """Runs already made due in the store (signal, finished child, freed slot, result)."""
        self._wakes.update(run_ids)
        self._schedule()

    def publish_timers(self, runs: Iterable[Run]) -> None:
        """Due timers this instance handed off: their wake time was pushed one lease ahead."""
        for run in runs:
            self._starts.pop(run.id, None)
            self._pending_timer_messages[run.id] = message(run, "timer")
        self._schedule()

    def _schedule(self) -> None:
        # Everything published during one pass of the event loop goes out in one batch; what is
        # published while a batch is being sent goes out in the next (see ``_send``).
        if self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._send())

    def _unsent(self) -> bool:
        return bool(self._starts or self._wakes or self._pending_timer_messages)

    async def _send(self) -> None:
        await asyncio.sleep(0)
        while self._unsent():
            await self._send_batch()

    async def _send_batch(self) -> None:
        starts, wakes, timers = self._starts, self._wakes, self._pending_timer_messages
        self._starts, self._wakes, self._pending_timer_messages = {}, set(), {}
        batch = [*starts.values(), *timers.values()]
        wakes -= set(starts) | set(timers)
        for delay in (*SEND_RETRY_DELAYS, None):
            try:
                if wakes:
                    runs = await self.sink.store.get_runs(sorted(wakes))
                    batch.extend(message(r, "wake") for r in runs.values() if not r.is_terminal)
                    wakes = set()
                await self.transport.enqueue_runs(batch)
                return
            except Exception as exc:
                if delay is not None:
                    await asyncio.sleep(delay)
                    continue
                # A start stays pending for the pending-run poll, a timer is due again after
                # its hold; a wake resumes here instead.
                self._failures.warning("run queue enqueue failed (%s); running wakes locally", exc)
                unsent = [*wakes, *(str(m["run_id"]) for m in batch if m["reason"] == "wake")]
                self.sink.send(unsent, Reason.UNSENT)

    async def flushed(self) -> None:
        """Return once everything published so far has been sent (or given up on)."""
        while self._flush is not None and not self._flush.done():
            await asyncio.gather(self._flush, return_exceptions=True)

    # ---------------------------------------------------------------- consuming

    @property
    def consuming(self) -> bool:
        return self._consumer is not None and not self._consumer.done()

    def start_consuming(self) -> None:
        self._stopping = False
        if not self.consuming:
            self._consumer = asyncio.create_task(self._consume(), name="runlane-run-queue")

    async def stop_consuming(self) -> None:
        self._stopping = True  # see RemoteDispatch: a cancel may surface as a driver error
        if self._consumer is not None:
            self._consumer.cancel()
            await asyncio.wait([self._consumer], timeout=5.0)
            self._consumer = None

    async def hand_back(self, keep: Collection[str] = ()) -> int:
        """Re-enqueue messages taken but not yet claimed (during a drain), but those of ``keep``
        (runs whose turn is still in flight here: handed back now, their wake would find them
        leased and be spent; the drain hands them back once their turns end)."""
        taken = [m for run_id, m in self.taken.items() if run_id not in keep]
        self.taken = {run_id: m for run_id, m in self.taken.items() if run_id in keep}
        self.handed_back.update(str(m["run_id"]) for m in taken)
        if taken:
            try:
                await self.transport.enqueue_runs(taken)
            except Exception as exc:
                self._failures.warning("handing back %d runs failed (%s)", len(taken), exc)
        return len(taken)

    async def _consume(self) -> None:
        sink = self.sink
        namespaces = None if sink.namespace is None else [sink.namespace]
        while not self._stopping:
            room = min(sink.options.max_prefetch - len(self.taken), sink.room())
            if room <= 0:
                await self._room_freed()
                continue
            try:
                codes = codes_of(sink.serves)
                messages = await self.transport.take_runs(namespaces, codes, room, TAKE_TIMEOUT)
            except Exception as exc:
                if self._stopping:
                    return
                self._failures.warning("taking from the run queue failed (%s); retrying", exc)
                await asyncio.sleep(TAKE_TIMEOUT)
                continue
            for raw in messages:
                try:
                    msg = check("run", raw)
                except Malformed as exc:
                    self._failures.warning("dropping a malformed run message: %s", exc)
                    continue
                run_id = str(msg["run_id"])
                self.taken[run_id] = msg
                # Only a handed-off timer overrides the stored wake time: every other wake was
                # made due in the store first, so a late duplicate finds nothing to claim.
                sink.take(run_id, handoff=msg.get("reason") == "timer")

    async def _room_freed(self) -> None:
        """Wait until a turn here ends or a taken id is claimed: either makes room to take."""
        self._claimed.clear()
        waits = {
            asyncio.ensure_future(self.sink.room_freed()),
            asyncio.ensure_future(self._claimed.wait()),
        }
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    def claiming(self, run_id: str) -> bool:
        """Called just before a claim; False when the message was handed back meanwhile."""
        if self.taken.pop(run_id, None) is not None:
            self._claimed.set()
        if run_id in self.handed_back:
            self.handed_back.discard(run_id)
            return False
        return True
