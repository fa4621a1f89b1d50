"""Giving a run back after its turn met an outage, now or as soon as the store answers again.

A turn that meets an outage gives its run back in one write: suspended and due now, with the
records it made. When the store cannot take that write either, the lease is still the turn's
(fences compare the lease's owner, not the clock), so the engine gives the run back once the
store answers, before its next recovery pass. Left to expire instead, the lease would make the
run's next claim a recovery, and ``max_recovery_attempts`` would settle ``dead`` a run that
only met outages: that limit is for runs that crash their process. A run another instance took
over meanwhile (the outage outlasted the lease) or that is being cancelled is left to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from .errors import LeaseLostError
from .faults import OutageLog, is_infrastructure
from .models import Writes
from .stores.base import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unreleased:
    """A run whose lease a turn holds and could not give back: what goes with it."""

    run_id: str
    owner: str
    writes: Writes
    slots: tuple[int, ...] = ()  # queued steps whose slots go with ``writes``


async def give_back(store: Store, run: Unreleased, now: datetime) -> None:
    """Park the run suspended and due now with ``run.writes``, releasing its lease. Fenced:
    raises ``LeaseLostError`` (``RunCancelling``) when the lease is gone (being cancelled)."""
    writes = run.writes
    if run.slots:
        # Queued attempts go with their slots or not at all: if not, the replay runs them
        # again in the slots they still hold.
        await store.release_steps(run.run_id, run.owner, writes, list(run.slots), now)
        writes = Writes()
    await store.suspend_run(run.run_id, run.owner, writes, now, now)


class Releases:
    """The runs this engine still has to give back, tried at the start of every pass."""

    def __init__(
        self, store: Callable[[], Store], now: Callable[[], datetime], outage: OutageLog
    ) -> None:
        self._store = store
        self._now = now
        self._outage = outage
        self._due: dict[str, Unreleased] = {}

    def __len__(self) -> int:
        return len(self._due)

    def defer(self, run: Unreleased) -> None:
        self._due[run.run_id] = run

    async def retry(self) -> list[str]:
        """Give back what can be now; returns the runs given back (due now). Stops at the
        first outage: the rest wait for the next pass."""
        given: list[str] = []
        for run in list(self._due.values()):
            try:
                await give_back(self._store(), run, self._now())
            except LeaseLostError:
                pass  # taken over after its lease ran out, or cancelled: not ours any more
            except Exception as exc:
                if is_infrastructure(exc):
                    self._outage.failed(exc, f"giving back {len(self._due)} run(s)")
                    return given
                log.exception("giving back run %s failed; its lease will expire", run.run_id)
            else:
                given.append(run.run_id)
            del self._due[run.run_id]
        return given
