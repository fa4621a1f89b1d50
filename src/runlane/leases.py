"""Lease renewal for every turn an engine has in flight, in one store call per beat.

A turn holds its run's lease while it executes. Renewing each lease on its own costs one round
trip per run per beat and, under load, each renewal queues for a pooled connection behind the
turns' own writes: a busy instance could lose leases it still holds. One keeper per engine
renews them all at once, every third of the lease, and tells a turn (by dropping it) when its
lease was taken over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from .faults import OutageLog, is_infrastructure
from .stores.base import Store

log = logging.getLogger("runlane.engine")

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
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def hold(self, run_id: str, owner: str) -> None:
        """Keep renewing ``run_id``'s lease for ``owner`` until ``release``."""
        self._held[run_id] = owner
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.create_task(self._keep(), name="runlane-leases")

    def release(self, run_id: str, owner: str) -> None:
        if self._held.get(run_id) == owner:
            del self._held[run_id]

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
                if run_id not in kept and self._held.get(run_id) == owner:
                    log.warning("lost the lease on run %s; its turn will be abandoned", run_id)
                    del self._held[run_id]
