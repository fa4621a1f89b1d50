"""Clocks: every engine timestamp comes from one of these."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def utc(value: datetime) -> datetime:
    """Reject naive datetimes; convert aware ones to UTC."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: runlane needs timezone-aware datetimes")
    return value.astimezone(UTC)
