"""Test kit: a manual clock, a replay of a run's history, and the contract suites a store or a
transport passes.

``ManualClock`` and ``replay`` are here; the suites are modules of their own,
``runlane.testing.store_contract`` and ``runlane.testing.transport_contract``, since they import
pytest (``import runlane.testing`` does not).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from runlane.clock import utc
from runlane.definitions import WorkflowDefinition, workflow_definition
from runlane.history import load_history, replay_sync


def replay(workflow: Any, history: Mapping[str, Any] | str | os.PathLike[str]) -> None:
    """Replay ``history`` (a document ``runlane runs export`` printed, its JSON text, or a file
    holding it) against the code of ``workflow`` (the decorated function); returns None when
    the code can replay it, raises :class:`~runlane.NonDeterminismError` (``seq``,
    ``recorded``, ``new``) where it diverges. Writes nothing and runs no step. Keep histories
    of real runs beside your tests and replay them against every change::

        def test_the_new_code_replays_last_weeks_orders():
            for path in Path("tests/histories").glob("order-*.json"):
                runlane.testing.replay(order, path)
    """
    definition = workflow if isinstance(workflow, WorkflowDefinition) else None
    definition = definition or workflow_definition(workflow)
    loaded = load_history(history)
    if loaded.run.workflow != definition.name:
        raise ValueError(
            f"the history is of workflow {loaded.run.workflow!r}, not {definition.name!r}"
        )
    replay_sync(definition, loaded)


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


__all__ = ["ManualClock", "replay"]
