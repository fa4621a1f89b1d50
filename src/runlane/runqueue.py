"""The run queue: how starts and wakes reach whichever instance takes them.

With a transport that has a run queue (db, redis), an engine sends every start and wake as a
run message instead of executing it itself, and consumes messages from the queue like every
other driving instance. The store stays the truth: the claim decides whether a message still
means anything, so a duplicate costs one claim and a lost message costs one poll interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .models import Run
from .transports.base import Message, Transport

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("runlane.runqueue")

FAILURE_LOG_INTERVAL = 60.0
TAKE_TIMEOUT = 1.0


class RateLimitedLog:
    """Logs a recurring failure at most once per interval."""

    def __init__(self, interval: float = FAILURE_LOG_INTERVAL) -> None:
        self.interval = interval
        self._last = -interval

    def warning(self, message: str, *args: Any) -> None:
        if time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            log.warning(message, *args)


def message(run: Run, reason: str) -> Message:
    return {
        "run_id": run.id,
        "namespace": run.namespace,
        "priority": run.priority,
        "reason": reason,
    }


class RunQueue:
    """Publishes an engine's starts and wakes in batches, and consumes its namespace's queue."""

    def __init__(self, engine: Engine, transport: Transport) -> None:
        self.engine = engine
        self.transport = transport
        self._starts: dict[str, Message] = {}
        self._wakes: set[str] = set()
        self._flush: asyncio.Task[None] | None = None
        self._consumer: asyncio.Task[None] | None = None
        self._failures = RateLimitedLog()
        self.taken: dict[str, Message] = {}  # taken from the queue, not yet claimed

    # ---------------------------------------------------------------- publishing

    def publish_starts(self, runs: Iterable[Run]) -> None:
        for run in runs:
            self._starts[run.id] = message(run, "start")
        self._schedule()

    def publish_wakes(self, run_ids: Iterable[str]) -> None:
        self._wakes.update(run_ids)
        self._schedule()

    def _schedule(self) -> None:
        # Everything published during one pass of the event loop goes out in one batch.
        if self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._send())

    async def _send(self) -> None:
        await asyncio.sleep(0)
        starts, wakes = self._starts, self._wakes
        self._starts, self._wakes = {}, set()
        batch = list(starts.values())
        try:
            if wakes:
                runs = await self.engine.store.get_runs(sorted(wakes - set(starts)))
                batch.extend(message(run, "wake") for run in runs.values() if not run.is_terminal)
            await self.transport.enqueue_runs(batch)
        except Exception as exc:
            # A start stays pending for the pending-run poll; a wake resumes here instead.
            self._failures.warning("run queue enqueue failed (%s); running wakes locally", exc)
            self.engine.run_locally(wakes - set(starts))

    async def flushed(self) -> None:
        if self._flush is not None:
            await asyncio.gather(self._flush, return_exceptions=True)

    # ---------------------------------------------------------------- consuming

    @property
    def consuming(self) -> bool:
        return self._consumer is not None and not self._consumer.done()

    def start_consuming(self) -> None:
        if not self.consuming:
            self._consumer = asyncio.create_task(self._consume(), name="runlane-run-queue")

    async def stop_consuming(self) -> None:
        if self._consumer is not None:
            self._consumer.cancel()
            await asyncio.gather(self._consumer, return_exceptions=True)
            self._consumer = None

    async def hand_back(self) -> int:
        """Re-enqueue messages taken but not yet claimed (during a drain)."""
        taken, self.taken = list(self.taken.values()), {}
        if taken:
            try:
                await self.transport.enqueue_runs(taken)
            except Exception as exc:
                self._failures.warning("handing back %d runs failed (%s)", len(taken), exc)
        return len(taken)

    async def _consume(self) -> None:
        engine = self.engine
        namespaces = None if engine.namespace is None else [engine.namespace]
        while True:
            room = min(engine.options.max_prefetch - len(self.taken), engine.local_room())
            if room <= 0:
                await engine.room_freed()
                continue
            try:
                messages = await self.transport.take_runs(namespaces, room, TAKE_TIMEOUT)
            except Exception as exc:
                self._failures.warning("taking from the run queue failed (%s); retrying", exc)
                await asyncio.sleep(TAKE_TIMEOUT)
                continue
            for msg in messages:
                run_id = str(msg.get("run_id"))
                self.taken[run_id] = msg
                engine.run_from_queue(run_id, handoff=msg.get("reason") == "wake")

    def claimed(self, run_id: str) -> None:
        self.taken.pop(run_id, None)
