"""A store of your own passes runlane's store contract: here, a thin subclass of MemoryStore.

A real one (another database) would build its store in `make_store` the same way, each call a
new object on the same backend, and empty the backend in `reset_for_tests()` or in the fixture.
"""

from collections.abc import Sequence
from datetime import datetime

import pytest

from runlane.models import Lease, RunSpec, Started
from runlane.stores import MemoryStore
from runlane.testing.store_contract import *  # noqa: F403  the contract's tests and fixtures


class AuditedStore(MemoryStore):
    """A store that counts the runs it created, on top of what MemoryStore does."""

    def __init__(self) -> None:
        super().__init__()
        self.created = 0

    async def create_runs(
        self,
        specs: Sequence[RunSpec],
        now: datetime,
        *,
        lease: Lease | None = None,
        claims: int = 1,
    ) -> list[Started]:
        started = await super().create_runs(specs, now, lease=lease, claims=claims)
        self.created += sum(1 for s in started if s.created)
        return started


@pytest.fixture
def make_store() -> type[AuditedStore]:
    # Each call builds another store object on your backend; the suite opens and closes them.
    return AuditedStore
