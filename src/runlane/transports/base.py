"""The Transport protocol: how instances and workers hand each other work.

A transport is never the source of truth. Every message names something the store holds (a run,
a step checkpoint); a receiver checks the store before acting, so a lost or duplicated message
costs latency, never correctness. Delivery is at-least-once at best and may be at-most-once
(a crash between take and act drops the message); the engine's polls cover the loss.

Every message is a JSON object (see docs/wire.md), so a worker can be written in any language:

* run message  ``{"run_id", "namespace", "workflow", "version", "priority", "reason"}``
  (reason: start | wake | timer)
* task         ``{"step_id", "run_id", "seq", "name", "group", "input", "attempt", "dispatched_at"}``
* result       ``{"step_id", "run_id", "seq", "ok", "output", "error", "attempt", "worker"}``
* heartbeat    ``{"step_id", "run_id", "seq", "attempt", "worker", "at"}``

Queues are named the same way on every transport (:mod:`runlane.transports.addresses`): one run
queue per namespace and code (``(workflow, version)``), one task queue per worker group, one
results queue, one decisions queue per remote workflow's code, one heartbeat channel.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]


@runtime_checkable
class HeartbeatFeed(Protocol):
    """The heartbeats one subscriber hears, from its subscription until it or the transport closes.

    Iterate it directly (the subscription starts at the first ``__anext__``), or enter it with
    ``async with`` to be sure it is subscribed before going on: a beat published after
    ``__aenter__`` returns is heard. A slow reader loses the oldest beats, never blocks a publisher.
    """

    def __aiter__(self) -> AsyncIterator[Message]: ...

    async def __anext__(self) -> Message: ...

    async def __aenter__(self) -> HeartbeatFeed: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def aclose(self) -> None:
        """Unsubscribe; iteration ends. Idempotent."""


@runtime_checkable
class Transport(Protocol):
    has_run_queue: bool
    """False for the in-process transport: runs then spread only through the store polls, and
    ``enqueue_runs``/``take_runs`` raise ``NotImplementedError``."""

    async def open(self) -> None:
        """Connect (and create the db transport's tables). Idempotent."""

    async def close(self) -> None:
        """Disconnect; pending and later takes return ``[]``, heartbeat feeds end. Idempotent.

        A message a take had already claimed when the close cut it short may be lost.
        """

    async def enqueue_runs(self, messages: Sequence[Message]) -> None:
        """Send run messages to the run queue of each message's namespace and code (its
        ``workflow`` and ``version``), in one batch.

        One round trip (or pipeline / multi-row insert) for the whole batch, whatever its size.
        Raises on failure; nothing is half-sent in a way the caller must undo (a retry may
        duplicate some messages, which receivers tolerate). An empty batch does nothing.
        """

    async def take_runs(
        self,
        namespaces: Sequence[str | None] | None,
        codes: Sequence[str],
        max_items: int,
        timeout: float,
    ) -> list[Message]:
        """Take up to ``max_items`` run messages of ``codes`` (``addresses.code(workflow,
        version)``: the runs the taker can replay), waiting up to ``timeout`` seconds for the
        first; messages of other codes stay for takers that serve them.

        ``namespaces=None`` takes from every namespace; ``[None]`` only from the run queues of
        runs without a namespace. More urgent (higher ``priority``) first within a run queue,
        oldest first among equals; each message is delivered to one taker. ``timeout <= 0``
        does not wait. Returns ``[]`` when nothing came in time.
        """

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        """Queue remote step tasks for a worker group, in one batch; each is taken by one worker.

        Oldest first. Same batching and failure rules as ``enqueue_runs``.
        """

    async def take_tasks(self, group: str, max_items: int, timeout: float) -> list[Message]:
        """Take up to ``max_items`` tasks of ``group``, waiting up to ``timeout`` for the first.

        Oldest first; ``[]`` when nothing came in time.
        """

    async def send_result(self, result: Message) -> None:
        """Return a step result; any engine instance may take it. Raises on failure."""

    async def take_results(self, max_items: int, timeout: float) -> list[Message]:
        """Take up to ``max_items`` results, waiting up to ``timeout`` for the first."""

    async def send_decision(self, queue: str, decision: Message) -> None:
        """Send a remote workflow turn's decision to ``queue`` (the workflow task's
        ``reply_to``: ``addresses.decision_queue`` of the run's code). Raises on failure."""

    async def take_decisions(
        self, queues: Sequence[str], max_items: int, timeout: float
    ) -> list[Message]:
        """Take up to ``max_items`` decisions from ``queues``, waiting up to ``timeout`` for
        the first; oldest first within a queue, each delivered to one taker."""

    async def publish_heartbeat(self, beat: Message) -> None:
        """Broadcast a heartbeat: every subscribed feed, in every process, hears it.

        Fire and forget: nobody listening is not an error, and a beat may be lost.
        """

    def heartbeats(self) -> HeartbeatFeed:
        """A new subscription to the heartbeats published from now on (see HeartbeatFeed)."""
        ...
