"""In-process building blocks the transports share: mailboxes, heartbeat fan-out, wake-ups."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType

from .base import Message

# A subscriber that stops reading must not grow without bound; beats are lossy anyway.
FEED_BACKLOG = 10_000


class Mailbox:
    """A FIFO of messages with a timed, batched take; closing it releases every waiting taker."""

    def __init__(self, maxlen: int | None = None) -> None:
        self._items: deque[Message] = deque(maxlen=maxlen)
        self._ready = asyncio.Event()
        self.closed = False

    def put_many(self, items: Iterable[Message]) -> None:
        self._items.extend(items)
        if self._items:
            self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    def take_now(self, max_items: int) -> list[Message]:
        count = min(max_items, len(self._items))
        return [self._items.popleft() for _ in range(count)]

    async def take(self, max_items: int, timeout: float | None) -> list[Message]:
        """Up to ``max_items`` messages, waiting up to ``timeout`` (None: forever) for the first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            items = self.take_now(max_items)
            if items or self.closed:
                return items
            self._ready.clear()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self._ready.wait(), remaining)
            except TimeoutError:
                return self.take_now(max_items)


class Feed:
    """One heartbeat subscription: a bounded mailbox the transport's fan-out fills."""

    def __init__(self, fanout: Fanout) -> None:
        self._fanout = fanout
        self._mailbox = Mailbox(maxlen=FEED_BACKLOG)
        self._started = False

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self._fanout.subscribe(self._mailbox)

    def __aiter__(self) -> Feed:
        return self

    async def __anext__(self) -> Message:
        await self.start()
        items = await self._mailbox.take(1, None)
        if not items:
            raise StopAsyncIteration
        return items[0]

    async def __aenter__(self) -> Feed:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._mailbox.close()
        self._fanout.unsubscribe(self._mailbox)


class Fanout:
    """Hands every heartbeat this process hears to every local subscriber.

    ``listen`` (idempotent, awaited before each subscription) lets a transport start listening
    (a Redis SUBSCRIBE, a PostgreSQL LISTEN) only once somebody wants beats.
    """

    def __init__(self, listen: Callable[[], Awaitable[None]] | None = None) -> None:
        self._subscribers: set[Mailbox] = set()
        self._listen = listen
        self.closed = False

    def feed(self) -> Feed:
        return Feed(self)

    async def subscribe(self, mailbox: Mailbox) -> None:
        if self.closed:
            mailbox.close()
            return
        if self._listen is not None:
            await self._listen()
        self._subscribers.add(mailbox)

    def unsubscribe(self, mailbox: Mailbox) -> None:
        self._subscribers.discard(mailbox)

    def deliver(self, beat: Message) -> None:
        for mailbox in self._subscribers:
            mailbox.put_many((beat,))

    def close(self) -> None:
        self.closed = True
        for mailbox in self._subscribers:
            mailbox.close()
        self._subscribers.clear()


class Wakeups:
    """Wakes takers waiting on named channels (a queue got messages, or the transport closed)."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self.closed = False

    def register(self, channels: Iterable[str]) -> asyncio.Event:
        event = asyncio.Event()
        for channel in channels:
            self._waiters.setdefault(channel, set()).add(event)
        if self.closed:
            event.set()
        return event

    def unregister(self, event: asyncio.Event) -> None:
        for channel, events in list(self._waiters.items()):
            events.discard(event)
            if not events:
                del self._waiters[channel]

    def notify(self, channel: str) -> None:
        for event in self._waiters.get(channel, ()):
            event.set()

    def close(self) -> None:
        self.closed = True
        for events in self._waiters.values():
            for event in events:
                event.set()


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait for ``event`` at most ``timeout`` seconds; a timeout is not an error here."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), max(0.0, timeout))


__all__ = ["Fanout", "Feed", "Mailbox", "Wakeups", "wait_event"]
