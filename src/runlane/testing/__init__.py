"""Test kit: a manual clock, and the contract suites a store or a transport passes.

``ManualClock`` is here; the suites are modules of their own, ``runlane.testing.store_contract``
and ``runlane.testing.transport_contract``, since they import pytest (``import runlane.testing``
does not).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane.clock import utc


class ManualClock:
    """A clock that only moves when told to. Starts at 2026-01-01T00:00:00Z by default."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = utc(start) if start is not None else datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        return self._now

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move forward by ``seconds`` (or a ``timedelta``); return the new time."""
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise ValueError("a ManualClock only moves forward")
        self._now += delta
        return self._now

    def set(self, when: datetime) -> datetime:
        """Jump to ``when`` (timezone-aware; a naive datetime is refused); return it in UTC."""
        self._now = utc(when)
        return self._now
