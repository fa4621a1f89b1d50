"""A transport of your own passes runlane's transport contract: here, a subclass of the in-process one."""

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest_asyncio

from runlane.testing.transport_contract import *  # noqa: F403  the contract's tests and fixtures
from runlane.transports import InProcessTransport
from runlane.transports.base import Message


class CountingTransport(InProcessTransport):
    """An in-process transport that counts the tasks it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        self.sent += len(tasks)
        await super().send_tasks(group, tasks)


@pytest_asyncio.fixture
async def make_transport() -> AsyncIterator[Callable[[], Awaitable[CountingTransport]]]:
    # Every call opens another transport object on the same queues; an in-process transport's
    # queues live in the object, so here every call returns the one shared object.
    shared = CountingTransport()
    await shared.open()

    async def build() -> CountingTransport:
        return shared

    yield build
    await shared.close()
