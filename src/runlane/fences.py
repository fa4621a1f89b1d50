"""Fencing tokens: which execution of a step is the latest, for the systems a step writes to.

A step executes on an engine under its run's claim, or on a worker for a task that claim sent.
A frozen process can still be executing it after its lease ran out and another instance took the
run over: no lease reaches into a step already running. Every claim takes the run's next fence
(``Run.fence``, bumped by the claim's own write), and a claim executes or sends each step at most
once, so each later execution of a step presents a greater fence than every earlier one. The
step reads it with :func:`step_context` and passes it to the system it writes to, which keeps
the highest fence it has seen per step and refuses a write with a lower one.

A worker keeps the highest fence it has seen per step too (:class:`FenceBook`), and starts no
task whose fence is not above it: a task sent again under a newer fence, delivered before an
older copy, or a copy delivered twice, runs once on that worker.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import NotInStepError

T = TypeVar("T")

BOOK_SIZE = 10_000
"""The steps a worker remembers the highest fence of (the most recently seen ones)."""


@dataclass(frozen=True, slots=True)
class StepContext:
    """The execution of a step that is running: what :func:`step_context` returns in it."""

    run_id: str
    seq: int
    name: str
    attempt: int
    fence: int
    """Greater than the fence of every earlier execution of this step (attempts, recoveries,
    re-sends of a remote step); 0 for a task from an engine that sends no fence."""

    @property
    def step_id(self) -> str:
        """``"<run id>:<seq>"``: the step's key for a system that keeps fences."""
        return f"{self.run_id}:{self.seq}"


_current: ContextVar[StepContext | None] = ContextVar("runlane_step", default=None)


def step_context() -> StepContext:
    """The step running here: its run id, seq, name, attempt and fencing token.

    Call it inside a step's function (a local step on an engine or in a remote workflow's turn,
    or a remote step on a worker); anywhere else it raises :class:`~runlane.NotInStepError`.
    """
    current = _current.get()
    if current is None:
        raise NotInStepError()
    return current


async def within(context: StepContext, call: Awaitable[T]) -> T:
    """Await a step's body with ``context`` as its :func:`step_context` (threads the body
    runs in copy it; so does a loop the call is handed to)."""
    token = _current.set(context)
    try:
        return await call
    finally:
        _current.reset(token)


def fence_of(message: Mapping[str, Any]) -> int | None:
    """The fence a wire message carries (a task, a result, a beat), or None when its sender
    sends none (it predates fencing)."""
    value = message.get("fence")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class FenceBook:
    """The highest fence a worker has seen for each key (a step, a run's turns), bounded."""

    def __init__(self, size: int = BOOK_SIZE) -> None:
        self._size = size
        self._highest: OrderedDict[tuple[str, ...], int] = OrderedDict()

    def admits(self, key: tuple[str, ...], fence: int | None) -> bool:
        """Whether a task of ``key`` under ``fence`` may start: its fence is above every one
        seen for the key (which it becomes). A task without a fence is always admitted."""
        if fence is None:
            return True
        seen = self._highest.get(key)
        if seen is not None and fence <= seen:
            return False
        self._highest[key] = fence
        self._highest.move_to_end(key)
        if len(self._highest) > self._size:
            self._highest.popitem(last=False)
        return True

    def seen(self, key: tuple[str, ...]) -> int | None:
        """The highest fence seen for ``key``, if it is remembered."""
        return self._highest.get(key)


__all__ = ["FenceBook", "StepContext", "fence_of", "step_context", "within"]
