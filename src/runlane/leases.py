"""Lease renewal for every turn an engine has in flight, in one store call per beat.

A turn holds its run's lease while it executes. Renewing each lease on its own costs one round
trip per run per beat and, under load, each renewal queues for a pooled connection behind the
turns' own writes: a busy instance could lose leases it still holds. One keeper per engine
renews them all at once, every third of the lease, and tells a turn (by dropping it) when its
lease was taken over.

It also remembers until when each lease is known to be held. A process frozen or starved past
that instant may have lost the lease without hearing of it yet; a turn asks (``expired``) before
it starts a step, and confirms the lease with the store first (``confirm``) when it ran out by
this engine's clock: a step already running is beyond any fence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from .faults import OutageLog, is_infrastructure
from .stores.base import Store

log = logging.getLogger(__name__)

STOP_TIMEOUT = 5.0


class LeaseKeeper:
    def __init__(
        self,
        store: Store,
        now: Callable[[], datetime],
        lease_seconds: Callable[[], float],
        outage: OutageLog,
    ) -> None:
        self._store = store
        self._now = now
        self._lease_seconds = lease_seconds
        self._outage = outage
        self._held: dict[str, str] = {}  # run id -> lease owner
        self._until: dict[str, datetime] = {}  # run id -> until when its lease is known held
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def hold(self, run_id: str, owner: str, until: datetime | None = None) -> None:
        """Keep renewing ``run_id``'s lease for ``owner`` until ``release``; ``until``: when
        the lease the claim took runs out."""
        self._held[run_id] = owner
        if until is not None:
            self._until[run_id] = until
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.create_task(self._keep(), name="runlane-leases")

    def release(self, run_id: str, owner: str) -> None:
        if self._held.get(run_id) == owner:
            del self._held[run_id]
            self._until.pop(run_id, None)

    def expired(self, run_id: str, now: datetime) -> bool:
        """Whether the lease may be gone: found lost, or run out by ``now`` (a turn that never
        said until when it holds its lease is taken at its word)."""
        if run_id not in self._held:
            return True
        until = self._until.get(run_id)
        return until is not None and now >= until

    async def confirm(self, run_id: str, owner: str) -> bool:
        """Renew this lease now, in a store call of its own; whether it is still held."""
        until = self._now() + timedelta(seconds=self._lease_seconds())
        kept = run_id in await self._store.renew_leases({run_id: owner}, until)
        if kept and self._held.get(run_id) == owner:
            self._until[run_id] = max(until, self._until.get(run_id, until))
        elif not kept and self._held.get(run_id) == owner:
            log.warning("lost the lease on run %s; its turn will be abandoned", run_id)
            del self._held[run_id]
            self._until.pop(run_id, None)
        return kept

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=STOP_TIMEOUT)

    async def _keep(self) -> None:
        while self._held and not self._stopping:
            await asyncio.sleep(max(0.05, self._lease_seconds() / 3))
            held = dict(self._held)
            if not held:
                return
            until = self._now() + timedelta(seconds=self._lease_seconds())
            try:
                kept = await self._store.renew_leases(held, until)
            except Exception as exc:
                if self._stopping:  # a cancellation surfacing as a driver error: stop here
                    return
                if is_infrastructure(exc):
                    # The turns' own writes meet the outage too, and give their runs back.
                    self._outage.failed(exc, f"renewing {len(held)} lease(s)")
                else:
                    log.exception("renewing %d lease(s) failed; retrying", len(held))
                continue
            for run_id, owner in held.items():
                if self._held.get(run_id) != owner:
                    continue
                if run_id in kept:
                    self._until[run_id] = max(until, self._until.get(run_id, until))
                    continue
                log.warning("lost the lease on run %s; its turn will be abandoned", run_id)
                del self._held[run_id]
                self._until.pop(run_id, None)
