"""The Redis transport (redis-py asyncio).

Keys, under a configurable prefix (``runlane`` by default):

* ``<prefix>:runs:...``           sorted set per namespace and code (``addresses.run_queue``); score
  ``-priority``, member ``<20-digit stamp>|<json>``, popped with BZMPOP MIN: most urgent first,
  oldest first among equals
* ``<prefix>:run-queues:<code>``   set of the run-queue keys of a code, for takers of every
  namespace
* ``<prefix>:tasks:<group>``       list per worker group (RPUSH, BLMPOP LEFT)
* ``<prefix>:results``             list (RPUSH, BLMPOP LEFT)
* ``<prefix>:decisions:<code>``    list per remote workflow's code (RPUSH, BLMPOP LEFT)
* ``<prefix>:heartbeats``          pub/sub channel: every subscribed instance hears every beat
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from ..serialization import dumps, loads
from .addresses import HEARTBEATS, RESULTS, qualified, run_queue, task_queue
from .base import Message
from .mailboxes import Fanout, Feed
from .messages import decode_each, message_code

log = logging.getLogger(__name__)

T = TypeVar("T")
# Values per ZADD/RPUSH inside one pipeline: a bounded request size, still one round trip.
CHUNK = 1000
ALL_NAMESPACES_SLICE = 0.5  # takers of every namespace re-read the queue set this often


class RedisTransport:
    has_run_queue = True

    def __init__(self, url: str | None = None, *, prefix: str = "runlane") -> None:
        self.url = url or os.environ.get("RUNLANE_REDIS_URL") or "redis://127.0.0.1:6379/0"
        self.prefix = prefix
        self._client: Redis | None = None
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._listen_lock = asyncio.Lock()
        self._closed = asyncio.Event()
        self._heartbeats = Fanout(self._listen)
        self._last_stamp = 0

    def key(self, name: str) -> str:
        return qualified(self.prefix, name)

    @property
    def client(self) -> Redis:
        if self._client is None:
            raise RuntimeError("RedisTransport is not open; call open() first")
        return self._client

    async def open(self) -> None:
        if self._client is None and not self._closed.is_set():
            self._client = Redis.from_url(self.url, decode_responses=True)

    async def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._heartbeats.close()
        if self._reader is not None:
            self._reader.cancel()
        if self._pubsub is not None:
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]
        if self._client is not None:
            await self._client.aclose()

    async def purge(self) -> None:
        """Delete every key under this transport's prefix (tests, resets)."""
        keys = [k async for k in self.client.scan_iter(match=f"{self.prefix}:*", count=1000)]
        for batch in _chunks(keys, CHUNK):
            await self.client.delete(*batch)

    # ---------------------------------------------------------------- runs

    async def enqueue_runs(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        queues: dict[str, dict[str, float]] = {}
        codes: dict[str, set[str]] = {}
        for stamp, message in zip(self._stamps(len(messages)), messages, strict=True):
            code = message_code(message)
            key = self.key(run_queue(message.get("namespace"), code))
            member = f"{stamp:020d}|{dumps(message)}"
            queues.setdefault(key, {})[member] = -float(message.get("priority") or 0)
            codes.setdefault(code, set()).add(key)
        pipe = self.client.pipeline(transaction=True)
        for key, members in queues.items():
            for batch in _chunks(list(members.items()), CHUNK):
                pipe.zadd(key, dict(batch))
        for code, keys in codes.items():
            pipe.sadd(self._queues_of(code), *keys)
        await pipe.execute()

    def _queues_of(self, code: str) -> str:
        return self.key(f"run-queues:{code}")

    async def take_runs(
        self,
        namespaces: Sequence[str | None] | None,
        codes: Sequence[str],
        max_items: int,
        timeout: float,
    ) -> list[Message]:
        if not codes:
            return await self._nothing(timeout)
        if namespaces is not None:
            keys = [self.key(run_queue(ns, code)) for ns in namespaces for code in codes]
            return await self._take_runs_from(keys, max_items, timeout)
        deadline = time.monotonic() + timeout
        while True:
            # New namespaces appear while we wait, so block in slices and re-read the sets.
            known = await self.client.sunion([self._queues_of(code) for code in codes])
            keys = sorted(str(k) for k in known)
            keys = keys or [self.key(run_queue(None, code)) for code in codes]
            remaining = deadline - time.monotonic()
            messages = await self._take_runs_from(
                keys, max_items, min(remaining, ALL_NAMESPACES_SLICE)
            )
            if messages or remaining <= ALL_NAMESPACES_SLICE or self._closed.is_set():
                return messages

    async def _take_runs_from(
        self, keys: list[str], max_items: int, timeout: float
    ) -> list[Message]:
        # BZMPOP pops from the first non-empty key only: shuffle so no namespace starves.
        random.shuffle(keys)
        reply = await self._pop(
            lambda t: self.client.bzmpop(t, len(keys), keys, min=True, count=max_items),
            lambda: self.client.zmpop(len(keys), keys, min=True, count=max_items),
            timeout,
        )
        if not reply:
            return []
        payloads = [member.partition("|")[2] for member, _score in reply[1]]
        return decode_each(payloads, "run message")

    async def _nothing(self, timeout: float) -> list[Message]:
        """A take of no queue at all: nothing comes, after the timeout (or the close)."""
        if timeout > 0:
            await self._until_closed(asyncio.sleep(timeout))
        return []

    def _stamps(self, count: int) -> range:
        # Wall-clock nanoseconds order equal priorities oldest first, across processes too.
        start = max(time.time_ns(), self._last_stamp + 1)
        self._last_stamp = start + count - 1
        return range(start, start + count)

    # ---------------------------------------------------------------- tasks and results

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        await self._push(self.key(task_queue(group)), tasks)

    async def take_tasks(self, group: str, max_items: int, timeout: float) -> list[Message]:
        return await self._take_list(self.key(task_queue(group)), max_items, timeout)

    async def send_result(self, result: Message) -> None:
        await self._push(self.key(RESULTS), [result])

    async def take_results(self, max_items: int, timeout: float) -> list[Message]:
        return await self._take_list(self.key(RESULTS), max_items, timeout)

    async def send_decision(self, queue: str, decision: Message) -> None:
        await self._push(self.key(queue), [decision])

    async def take_decisions(
        self, queues: Sequence[str], max_items: int, timeout: float
    ) -> list[Message]:
        if not queues:
            return await self._nothing(timeout)
        keys = [self.key(queue) for queue in queues]
        random.shuffle(keys)  # BLMPOP pops from the first non-empty key only
        reply = await self._pop(
            lambda t: self.client.blmpop(t, len(keys), *keys, direction="LEFT", count=max_items),
            lambda: self.client.lmpop(len(keys), *keys, direction="LEFT", count=max_items),
            timeout,
        )
        return decode_each(reply[1], "decision") if reply else []

    async def _push(self, key: str, messages: Sequence[Message]) -> None:
        if not messages:
            return
        pipe = self.client.pipeline(transaction=True)
        for batch in _chunks([dumps(m) for m in messages], CHUNK):
            pipe.rpush(key, *batch)
        await pipe.execute()

    async def _take_list(self, key: str, max_items: int, timeout: float) -> list[Message]:
        reply = await self._pop(
            lambda t: self.client.blmpop(t, 1, key, direction="LEFT", count=max_items),
            lambda: self.client.lmpop(1, key, direction="LEFT", count=max_items),
            timeout,
        )
        return decode_each(reply[1], "message") if reply else []

    async def _pop(
        self,
        blocking: Callable[[float], Awaitable[Any]],
        immediate: Callable[[], Awaitable[Any]],
        timeout: float,
    ) -> Any:
        if self._closed.is_set():
            return None
        # A blocking timeout of 0 means "forever" to Redis; ours means "do not wait".
        if timeout <= 0:
            return await immediate()
        return await self._until_closed(blocking(timeout))

    async def _until_closed(self, call: Awaitable[T]) -> T | None:
        task = asyncio.ensure_future(call)
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
            return task.result() if task.done() else None
        finally:
            for pending in (task, closed):
                if not pending.done():
                    pending.cancel()

    # ---------------------------------------------------------------- heartbeats

    async def publish_heartbeat(self, beat: Message) -> None:
        await self.client.publish(self.key(HEARTBEATS), dumps(beat))

    def heartbeats(self) -> Feed:
        return self._heartbeats.feed()

    async def _listen(self) -> None:
        async with self._listen_lock:
            if self._pubsub is not None:
                return
            pubsub = self.client.pubsub()
            await pubsub.subscribe(self.key(HEARTBEATS))
            # Wait for the server's confirmation: a beat published after this is heard.
            while await pubsub.get_message(timeout=5.0) is None:
                pass
            self._pubsub = pubsub
            self._reader = asyncio.create_task(self._read_beats(pubsub))

    async def _read_beats(self, pubsub: PubSub) -> None:
        while True:
            try:
                async for message in pubsub.listen():
                    self._deliver(message)
            except RedisError as exc:
                # redis-py re-subscribes when it reconnects; beats meanwhile are lost, as allowed.
                log.warning("runlane redis transport: heartbeat subscription lost (%s)", exc)
                await asyncio.sleep(1.0)

    def _deliver(self, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        try:
            self._heartbeats.deliver(loads(message["data"]))
        except ValueError:
            log.warning("dropping a malformed heartbeat: %.200r", message["data"])


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = ["RedisTransport"]
