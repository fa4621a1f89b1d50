"""The in-process transport: asyncio queues inside one process, no run queue.

Runs spread between processes only through the store's polls; tasks, results and heartbeats
travel here so that a Worker in the same process (tests, the demo) executes remote steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..serialization import dumps, loads
from .base import Message
from .local import Fanout, Feed, Mailbox


class InProcessTransport:
    has_run_queue = False

    def __init__(self) -> None:
        self._tasks: dict[str, Mailbox] = {}
        self._results = Mailbox()
        self._heartbeats = Fanout()
        self._closed = False

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        self._closed = True
        for mailbox in (*self._tasks.values(), self._results):
            mailbox.close()
        self._heartbeats.close()

    async def enqueue_runs(self, messages: Sequence[Message]) -> None:
        raise NotImplementedError("the in-process transport has no run queue (has_run_queue=False)")

    async def take_runs(
        self, namespaces: Sequence[str | None] | None, max_items: int, timeout: float
    ) -> list[Message]:
        raise NotImplementedError("the in-process transport has no run queue (has_run_queue=False)")

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        self._group(group).put_many(_wire(task) for task in tasks)

    async def take_tasks(self, group: str, max_items: int, timeout: float) -> list[Message]:
        return await self._group(group).take(max_items, timeout)

    async def send_result(self, result: Message) -> None:
        self._results.put_many((_wire(result),))

    async def take_results(self, max_items: int, timeout: float) -> list[Message]:
        return await self._results.take(max_items, timeout)

    async def publish_heartbeat(self, beat: Message) -> None:
        self._heartbeats.deliver(_wire(beat))

    def heartbeats(self) -> Feed:
        return self._heartbeats.feed()

    def _group(self, group: str) -> Mailbox:
        mailbox = self._tasks.get(group)
        if mailbox is None:
            mailbox = self._tasks[group] = Mailbox()
            if self._closed:
                mailbox.close()
        return mailbox


def _wire(message: Message) -> Message:
    # A round trip through JSON, so a message here looks exactly as it would off Redis or a table.
    copy: Message = loads(dumps(message))
    return copy


__all__ = ["InProcessTransport"]
