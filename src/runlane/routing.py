"""Where a run made due goes: the one decision, over the instance's mode and the reason.

A run becomes due for many reasons (a start, a signal, a remote result landing here, a turn
here waking its parent, a timer) and can go three ways: to the run queue for whichever instance
consumes it, to a local task of this instance, or nowhere yet (it stays due in the store for a
poll or a ``tick`` to find). Which one depends only on what this instance is (:class:`Mode`)
and why the run is due (:class:`Reason`): :func:`where` is that table.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable


class Mode(enum.Enum):
    """What an instance does with due runs, from its run queue, ``drive`` and consumers."""

    FLEET = "fleet"
    """Consumes the run queue: starts, wakes and due timers travel through it."""
    PRODUCER = "producer"
    """Has a run queue it does not consume (``drive=False``): starts and wakes go to it."""
    ALONE = "alone"
    """Drives without a run queue to hand runs to: they execute here."""
    IDLE = "idle"
    """Neither drives nor produces (``drive=False`` without a run queue, or drained): due
    runs wait in the store for a poll, a ``tick``, or another instance."""


class Reason(enum.Enum):
    """Why a run is due now."""

    START = "start"
    """Created by a start (``start``, an event subscriber, a schedule's window)."""
    WAKE = "wake"
    """Made due in the store by a call (signal, event, requeue) or a freed step-queue slot."""
    LANDED = "landed"
    """A remote step's result this instance recorded, or a singleton slot a settlement here
    hands on: the run may go on here at once."""
    FOLLOW_UP = "follow-up"
    """Woken by a turn that ran here (a parent, new children, a freed singleton slot)."""
    TIMER = "timer"
    """Its wake time has come (the timer poll found it)."""
    RECOVERY = "recovery"
    """Its lease expired: the instance of its turn died mid-turn (the recovery poll found it)."""
    UNSENT = "unsent"
    """A wake the run queue failed to send."""


class Where(enum.Enum):
    QUEUE = "queue"
    """The run queue: whichever instance consumes it claims the run."""
    HERE = "here"
    """A local task of this instance."""
    STORE = "store"
    """Nowhere now: the run stays due in the store."""


def where(mode: Mode, reason: Reason, *, room: bool) -> Where:
    """Where a run due for ``reason`` goes from an instance in ``mode`` (``room``: it has room
    for one more turn now)."""
    driving = mode in (Mode.FLEET, Mode.ALONE)
    if reason is Reason.LANDED and driving and room:
        # A wake through the run queue would cost every remote step of a sequential
        # workflow one more hop.
        return Where.HERE
    if reason is Reason.UNSENT:
        return Where.HERE if driving else Where.STORE
    if reason in (Reason.FOLLOW_UP, Reason.TIMER, Reason.RECOVERY):
        # A fleet shares them out; otherwise whoever ran the turn (or the poll) runs them.
        return Where.QUEUE if mode is Mode.FLEET else Where.HERE
    if mode in (Mode.FLEET, Mode.PRODUCER):
        return Where.QUEUE
    return Where.HERE if mode is Mode.ALONE else Where.STORE


class Recently:
    """Run ids sent within the last ``window()`` seconds (monotonic time): a poll that finds
    the same due run again before another instance took it sends it once, not every pass."""

    def __init__(
        self, window: Callable[[], float], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window = window
        self._clock = clock
        self._sent: dict[str, float] = {}

    def fresh(self, run_ids: Iterable[str]) -> list[str]:
        """The ids not sent within the window, now counted as sent."""
        now, window = self._clock(), self._window()
        if len(self._sent) > 10_000:
            self._sent = {i: t for i, t in self._sent.items() if now - t < window}
        fresh = [i for i in run_ids if now - self._sent.get(i, -window) >= window]
        self._sent.update((i, now) for i in fresh)
        return fresh


__all__ = ["Mode", "Reason", "Recently", "Where", "where"]
