"""An engine's background loop: when to look for due work again.

A pass runs every phase once (``Execution.tick``). Between passes the loop waits the poll
interval, less when a pass filled a batch (a backlog: more is due) or when a known wake time
comes sooner, and not at all once something asks for a pass now (``poll_soon``). While the
store is unreachable it backs off instead, and is woken early when another call finds the
store back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sized
from datetime import datetime

from .faults import OutageLog, is_infrastructure

log = logging.getLogger(__name__)

BACKLOG_POLL = 0.05
"""Seconds between the loop's passes while its polls keep finding full batches of due work."""

OUTAGE_BACKOFF_MAX = 5.0
"""Seconds between the loop's passes, at most, while the store is unreachable."""


class Loop:
    def __init__(
        self,
        one_pass: Callable[[], Awaitable[int]],
        *,
        now: Callable[[], datetime],
        poll_interval: Callable[[], float],
        outage: OutageLog,
        accepting: Callable[[], bool],
    ) -> None:
        self._pass = one_pass
        self._accepting = accepting  # False once the engine drains: no pass after that
        self._now = now
        self._poll_interval = poll_interval
        self._outage = outage
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._next_wake: datetime | None = None
        self._backlog = False  # a poll of the last pass filled its batch: more work is due

    def open(self) -> None:
        """Each time the engine opens: a fresh wake-up."""
        self._wakeup = asyncio.Event()

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self, name: str) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def inside(self) -> bool:
        """Whether the caller is the loop's pass (which spawns turns rather than awaits them)."""
        return self._task is not None and asyncio.current_task() is self._task

    def poll_soon(self) -> None:
        """Look for due work now rather than at the next poll interval."""
        if self._wakeup is not None:
            self._wakeup.set()

    def note_wake(self, when: datetime) -> None:
        """Something is due at ``when``: the loop comes back by then."""
        if self._next_wake is None or when < self._next_wake:
            self._next_wake = when
            self.poll_soon()

    def note_batch(self, found: Sized, limit: int) -> None:
        """A poll that filled its batch left more due work behind: the loop comes back soon."""
        if len(found) >= limit:
            self._backlog = True

    def note_backlog(self) -> None:
        self._backlog = True

    async def _run(self) -> None:
        assert self._wakeup is not None
        last_error = 0.0
        backoff = 0.0
        while self._accepting():
            self._wakeup.clear()
            self._backlog = False
            try:
                await self._pass()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_infrastructure(exc):
                    # Back off while the store is unreachable: wakes would only fail again.
                    self._outage.failed(exc, "polling for due work")
                    backoff = min(OUTAGE_BACKOFF_MAX, max(self._poll_interval(), backoff * 2))
                    # Woken early when another call finds the store back.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), backoff)
                    continue
                if time.monotonic() - last_error > 60:
                    log.exception("engine loop pass failed; retrying")
                    last_error = time.monotonic()
            else:
                backoff = 0.0
                self._outage.succeeded()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self._delay())

    def _delay(self) -> float:
        delay = self._poll_interval()
        if self._backlog:
            # Due work is waiting (a burst of timers, a backlog of starts): the next pass
            # comes once the batch just spawned has had a moment, not a whole interval later.
            delay = min(delay, BACKLOG_POLL)
        if self._next_wake is not None:
            until = (self._next_wake - self._now()).total_seconds()
            if until <= delay:
                self._next_wake = None
                delay = max(0.0, until)
        return delay


__all__ = ["Loop"]
