"""Fault injection for the outage tests: a real store whose chosen calls meet an outage.

Not a double of the backend: every call that goes through reaches the real store (memory, SQLite
or PostgreSQL). An outage is injected before a call (nothing written) or after it (written, but
the caller hears the connection drop: the outcome-unknown case), as a driver would raise it.
"""

from __future__ import annotations

import inspect
from collections import Counter, defaultdict
from typing import Any, Literal

import psycopg

from runlane.stores.base import Store

When = Literal["before", "after"]


def outage() -> psycopg.OperationalError:
    """What a store that does not translate its driver's errors raises when the server is gone."""
    return psycopg.OperationalError("consuming input failed: server closed the connection")


class FlakyStore:
    """Wraps a store; ``fail(method)`` cuts its next call(s), ``down = True`` cuts them all."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.atomic_admission = inner.atomic_admission
        self.down = False
        self.calls: Counter[str] = Counter()
        self.fired = 0  # outages injected so far
        self._faults: defaultdict[str, list[When | None]] = defaultdict(list)

    def fail(self, method: str, *, times: int = 1, when: When = "before", after: int = 0) -> None:
        """Cut the next ``times`` calls of ``method`` once ``after`` more have gone through."""
        self._faults[method].extend([None] * after + [when] * times)

    def pending(self, method: str) -> int:
        """Faults planned for ``method`` that have not happened yet."""
        return len(self._faults[method])

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attr) or name in ("open", "close"):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            planned = self._faults[name]
            when = planned.pop(0) if planned else None
            if self.down or when == "before":
                self.fired += 1
                raise outage()
            result = await attr(*args, **kwargs)
            if when == "after":
                self.fired += 1
                raise outage()
            return result

        return call
