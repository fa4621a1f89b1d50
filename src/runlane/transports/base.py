"""The Transport protocol: how instances and workers hand each other work.

A transport is never the source of truth. Every message names something the store holds (a run,
a step checkpoint); a receiver checks the store before acting, so a lost or duplicated message
costs latency, never correctness. Delivery is at-least-once at best and may be at-most-once
(a crash between take and act drops the message); the engine's polls cover the loss.

Every message is a JSON object (see docs/wire.md), so a worker can be written in any language:

* run message  ``{"run_id", "namespace", "priority", "reason"}`` (reason: start | wake)
* task         ``{"step_id", "run_id", "seq", "name", "group", "input", "attempt", "dispatched_at"}``
* result       ``{"step_id", "run_id", "seq", "ok", "output", "error", "attempt", "worker"}``
* heartbeat    ``{"step_id", "run_id", "seq", "worker", "at"}``
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]


@runtime_checkable
class Transport(Protocol):
    has_run_queue: bool
    """False for the in-process transport: runs then spread only through the store polls."""

    async def open(self) -> None:
        """Connect. Idempotent."""

    async def close(self) -> None:
        """Disconnect; pending takes return empty. Idempotent."""

    async def enqueue_runs(self, messages: Sequence[Message]) -> None:
        """Send run messages to the run queue of each message's namespace, in one batch.

        One round trip (or pipeline / multi-row insert) for the whole batch, whatever its size.
        Raises on failure; nothing is half-sent in a way the caller must undo.
        """

    async def take_runs(
        self, namespaces: Sequence[str | None] | None, max_items: int, timeout: float
    ) -> list[Message]:
        """Take up to ``max_items`` run messages, waiting up to ``timeout`` seconds for the first.

        ``namespaces=None`` takes from every namespace. More urgent (higher ``priority``) first
        where the transport can order; each message is delivered to one taker.
        """

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        """Queue remote step tasks for a worker group; each is taken by one worker."""

    async def take_tasks(self, group: str, max_items: int, timeout: float) -> list[Message]:
        """Take up to ``max_items`` tasks of ``group``, waiting up to ``timeout`` for the first."""

    async def send_result(self, result: Message) -> None:
        """Return a step result; any engine instance may take it."""

    async def take_results(self, max_items: int, timeout: float) -> list[Message]:
        """Take up to ``max_items`` results, waiting up to ``timeout`` for the first."""

    async def publish_heartbeat(self, beat: Message) -> None:
        """Broadcast a heartbeat: every subscribed instance hears it (fire and forget)."""

    def heartbeats(self) -> AsyncIterator[Message]:
        """Heartbeats published from now on, until the transport closes."""
        ...
