"""Wakes whose claim found the run leased by a turn elsewhere, tried again in memory.

A wake that lands while a turn holds the run is stamped in the store (``wake_requested_at``)
and the turn's suspension leaves the run due, so a live holder takes it itself. A holder that
died never suspends: its run would wait for some instance's recovery poll after the lease
expired. So the instance whose claim was refused keeps the wake and claims again when the
lease runs out, and again at each later expiry while the lease is renewed (the holder's turn
still runs); once the run is no longer leased, its holder has taken the wake or left the run
due, and the retry ends (the claim is refused, or it takes the run).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Protocol

from .faults import is_infrastructure
from .stores.base import Store


class WakeHost(Protocol):
    """What the retried wakes need of their instance."""

    @property
    def store(self) -> Store: ...

    @property
    def accepting(self) -> bool:
        """False once the instance drains: it takes no wake then."""
        ...

    def now(self) -> datetime: ...

    def wake_here(self, run_id: str) -> None:
        """Try the wake of ``run_id`` again, on a local task."""
        ...


class LeasedWakes:
    """The wakes of one instance that met a held lease, each due again at its lease's end."""

    def __init__(self, host: WakeHost) -> None:
        self._host = host
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._timers)

    async def refused(self, run_id: str) -> None:
        """The claim of a wake of ``run_id`` was refused: retry it when the run's lease ends
        (nothing when the run is not leased: its claim was refused for another reason)."""
        host = self._host
        if not host.accepting:
            return  # draining: the run stays in the store for another instance
        try:
            run = await host.store.get_run(run_id)
        except Exception as exc:
            if not is_infrastructure(exc):
                raise
            return  # the lease, when it expires, is the recovery poll's
        now = host.now()
        expires = run.lease_expires_at if run is not None else None
        if run is None or run.is_terminal or expires is None or expires <= now:
            return
        self._cancel(run_id)
        delay = (expires - now).total_seconds()
        self._timers[run_id] = asyncio.get_running_loop().call_later(delay, self._retry, run_id)

    def _retry(self, run_id: str) -> None:
        self._timers.pop(run_id, None)
        if self._host.accepting:
            self._host.wake_here(run_id)

    def _cancel(self, run_id: str) -> None:
        timer = self._timers.pop(run_id, None)
        if timer is not None:
            timer.cancel()

    def drop(self) -> None:
        """Forget every wake kept (a drain): the runs stay in the store."""
        for run_id in list(self._timers):
            self._cancel(run_id)


__all__ = ["LeasedWakes"]
