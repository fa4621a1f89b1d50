"""A TCP proxy on loopback between the fleet and its Redis server, to delay or drop messages.

Every engine, worker and the producer reach Redis through it. ``hold(seconds, drop=False)``
stops forwarding bytes in both directions for that long, then delivers them late (a delay: run
messages, tasks, results and heartbeats all arrive seconds late) or, with ``drop``, throws them
away and resets every connection (a drop: what was sent meanwhile is lost, including what the
server popped off a list for a client that never got the reply).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from tests.servers import free_port


class Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._flowing = asyncio.Event()
        self._links: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()  # its self-pipe's sockets, or a ResourceWarning when collected

    def hold(self, seconds: float, *, drop: bool = False) -> None:
        """Forward nothing for ``seconds``; then deliver what waited, or drop it (and every
        connection)."""
        self._loop.call_soon_threadsafe(self._flowing.clear)
        time.sleep(seconds)
        if drop:
            asyncio.run_coroutine_threadsafe(self._sever(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._flowing.set)

    async def _listen(self) -> None:
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._sever()

    async def _sever(self) -> None:
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:  # Redis is restarting: the client reconnects
            writer.transport.abort()
            return
        self._links.update((writer, up_writer))
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        self._links.difference_update((writer, up_writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                if writer.transport.is_closing():
                    break  # dropped while it waited
                writer.write(data)
                await writer.drain()
        writer.transport.abort()  # one side is gone: so is the other
