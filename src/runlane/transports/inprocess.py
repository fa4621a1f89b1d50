"""The in-process transport: asyncio queues inside one process, no run queue.

Runs spread between processes only through the store's polls; tasks, results and heartbeats
travel here so that a Worker in the same process (tests, the demo) executes remote steps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..serialization import dumps, loads
from .base import Message
from .mailboxes import Fanout, Feed, Mailbox, Wakeups, wait_event


class InProcessTransport:
    has_run_queue = False

    def __init__(self) -> None:
        self._tasks: dict[str, Mailbox] = {}
        self._results = Mailbox()
        self._decisions: dict[str, Mailbox] = {}
        self._decided = Wakeups()
        self._heartbeats = Fanout()
        self._closed = False

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        self._closed = True
        for mailbox in (*self._tasks.values(), self._results, *self._decisions.values()):
            mailbox.close()
        self._decided.close()
        self._heartbeats.close()

    async def enqueue_runs(self, messages: Sequence[Message]) -> None:
        raise NotImplementedError("the in-process transport has no run queue (has_run_queue=False)")

    async def take_runs(
        self,
        namespaces: Sequence[str | None] | None,
        codes: Sequence[str],
        max_items: int,
        timeout: float,
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

    async def send_decision(self, queue: str, decision: Message) -> None:
        self._decisions.setdefault(queue, Mailbox()).put_many((_wire(decision),))
        self._decided.notify(queue)

    async def take_decisions(
        self, queues: Sequence[str], max_items: int, timeout: float
    ) -> list[Message]:
        deadline = time.monotonic() + timeout
        woken = self._decided.register(queues)
        try:
            while True:
                woken.clear()
                taken: list[Message] = []
                for queue in queues:
                    mailbox = self._decisions.get(queue)
                    if mailbox is not None:
                        taken += mailbox.take_now(max_items - len(taken))
                remaining = deadline - time.monotonic()
                if taken or remaining <= 0 or self._closed:
                    return taken
                await wait_event(woken, remaining)
        finally:
            self._decided.unregister(woken)

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
