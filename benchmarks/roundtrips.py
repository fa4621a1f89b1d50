"""Count PostgreSQL round trips from the outside: a loopback TCP proxy in its own thread.

A round trip is a burst from the client answered by the server: on each connection, every
server->client read that follows client->server data counts one. Pipelined statements sent
together and answered together count once, which is what "one round trip" means.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress


class RoundTripProxy:
    def __init__(self, upstream_port: int = 5432) -> None:
        self.upstream_port = upstream_port
        self.trips = 0
        self.port = 0
        self._ready = threading.Event()
        threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True).start()
        self._ready.wait(10)

    def url(self, url: str) -> str:
        """``url`` with its port replaced by the proxy's."""
        return url.replace(f":{self.upstream_port}/", f":{self.port}/")

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await server.serve_forever()

    async def _connection(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        last = [""]
        await asyncio.gather(
            self._pump(client_r, server_w, "up", last), self._pump(server_r, client_w, "down", last)
        )

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: str, last: list[str]
    ) -> None:
        with suppress(Exception):
            while data := await reader.read(65536):
                if way == "down" and last[0] == "up":
                    self.trips += 1
                last[0] = way
                writer.write(data)
                await writer.drain()
        with suppress(Exception):
            writer.close()
