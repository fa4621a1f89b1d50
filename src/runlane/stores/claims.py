"""The claim of a claimable run, for the stores that read and write whole run records.

The memory and SQLite stores decide a claim in Python, inside their one atomic unit (a lock-free
event loop step; a ``BEGIN IMMEDIATE`` transaction): the same steps in the same order, over their
own rows. PostgreSQL states the same decision in its claim statement.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from ..models import (
    Claim,
    ClaimOutcome,
    Lease,
    RetryTimer,
    Run,
    RunStatus,
    Settlement,
    admitted_run,
    blocked_run,
    dead_settlement,
)


class ClaimRows(Protocol):
    """The writes a claim makes, on the store's rows, inside the caller's atomic unit."""

    def save(self, run: Run) -> None:
        """Write ``run`` over its record."""

    def finish(self, run: Run, settlement: Settlement, now: datetime) -> Run:
        """Settle ``run`` terminal (its slot released, its waiters and parent woken)."""

    def lease(self, run: Run, lease: Lease, now: datetime) -> Claim:
        """Lease ``run`` (``models.claimed_run``) and read its step records and signals."""

    def admits(self, run: Run, now: datetime) -> bool:
        """Whether a free slot of its singleton key is this waiter's."""

    def release_queue_slots(self, run_id: str, now: datetime) -> None:
        """Give back the step queue slots the run's lost turn was admitted to."""


@dataclass(frozen=True, slots=True)
class ClaimRules:
    """What the engine asks of a claim: see ``Store.claim_run``."""

    singleton_retry: RetryTimer
    max_recoveries: int | None
    dead_letters: Collection[str]


def claim(
    rows: ClaimRows, run: Run, lease: Lease, now: datetime, rules: ClaimRules
) -> ClaimOutcome:
    """Claim ``run``, claimable at ``now``: recover it if its lease expired, admit it if it
    waits for a slot of its key, and lease it; or settle it, or park it blocked."""
    if run.status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        run = replace(run, recoveries=run.recoveries + 1)
        rows.save(run)
        ended = _recovered(rows, run, lease, now, rules)
        if ended is not None:
            return ended
    released = None
    if run.singleton_key is not None and not run.holds_slot:
        if not rows.admits(run, now):
            rows.save(blocked_run(run, rules.singleton_retry, now))
            return ClaimOutcome(parked=True)
        released = run.handoff_at
        run = admitted_run(run)
    return ClaimOutcome(claim=rows.lease(run, lease, now), handed_off_at=released)


def _recovered(
    rows: ClaimRows, run: Run, lease: Lease, now: datetime, rules: ClaimRules
) -> ClaimOutcome | None:
    """The outcome for a run whose lease expired, when the claim ends there (None: go on)."""
    if run.status == RunStatus.CANCELLING:
        cancelled = Settlement(RunStatus.CANCELLED, None, run.error)
        return ClaimOutcome(settled=rows.finish(run, cancelled, now))
    dead = dead_settlement(run.recoveries, rules.max_recoveries)
    if dead is not None and run.workflow in rules.dead_letters:
        return ClaimOutcome(claim=rows.lease(run, lease, now), dying=True)
    if dead is not None:
        return ClaimOutcome(settled=rows.finish(run, dead, now))
    if run.queued:  # the slots its lost turn held go (its replay asks again)
        rows.release_queue_slots(run.id, now)
    return None


__all__ = ["ClaimRows", "ClaimRules", "claim"]
