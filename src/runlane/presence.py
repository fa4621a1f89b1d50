"""Engines announce themselves in the store: who each is, the code it serves, a heartbeat.

An engine writes its record when it opens (:meth:`Presence.announce`), beats every third of
its lease from the loop's passes (:meth:`Presence.beat_if_due`), and removes it when it stops
cleanly (:meth:`Presence.withdraw`). One that goes silent for three of its leases is listed as
gone (``EngineInfo.alive``); its record is deleted an hour later by whichever engine beats
then. Operators read the records (``engine.list_engines()``, ``runlane engines``,
``GET /engines``), and ``runlane_runs_unserved`` counts the active runs of codes no live engine
serves: a deploy that left a version without an engine shows up there.

Nothing here decides anything: claims are routed by the code each engine passes to the store
(:class:`~runlane.models.Serves`), whether or not its record is current.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from .faults import OutageLog, is_infrastructure
from .models import EngineInfo, Serves
from .stores.base import Store

log = logging.getLogger(__name__)

BEATS_PER_LEASE = 3
"""An engine beats this many times per lease: three beats in a row can go missing before it
is listed as gone."""

GONE_AFTER_LEASES = 3
"""An engine silent for this many of its leases is listed as gone (not alive)."""

PRUNE_AFTER = 3600.0
"""Seconds after its last beat that an engine's record is deleted."""


class Presence:
    """One engine's record in the store."""

    def __init__(
        self,
        engine_id: str,
        store: Callable[[], Store],
        now: Callable[[], datetime],
        lease: Callable[[], float],
        outage: OutageLog,
    ) -> None:
        self._id = engine_id
        self._store = store
        self._now = now
        self._lease = lease
        self._outage = outage
        self._info: EngineInfo | None = None
        self._beaten_at: datetime | None = None

    async def announce(
        self,
        serves: Serves,
        groups: Iterable[str],
        namespace: str | None,
    ) -> None:
        """Write this engine's record: what it serves (nothing for a pure producer)."""
        now = self._now()
        self._info = EngineInfo(
            id=self._id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=now,
            last_beat_at=now,
            serves=tuple(sorted(serves.pairs)),
            groups=tuple(sorted(set(groups))),
            namespace=namespace,
            lease=self._lease(),
        )
        await self._store().announce_engine(self._info)
        self._beaten_at = now

    async def beat_if_due(self) -> None:
        """Beat when a third of the lease passed since the last beat; an outage is logged and
        the beat tried again at the next pass (a record found missing is written again)."""
        info, last = self._info, self._beaten_at
        now = self._now()
        if info is None or last is None or now - last < self._interval():
            return
        try:
            store = self._store()
            if not await store.beat_engine(self._id, now):
                await store.announce_engine(replace(info, last_beat_at=now))
            await store.prune_engines(now - timedelta(seconds=PRUNE_AFTER))
        except Exception as exc:
            if not is_infrastructure(exc):
                raise
            self._outage.failed(exc, "recording this engine's heartbeat")
            return
        self._beaten_at = now

    async def withdraw(self) -> None:
        """Remove the record (the engine stops cleanly); an outage leaves it to go silent."""
        if self._info is None:
            return
        self._info = None
        try:
            await self._store().remove_engine(self._id)
        except Exception as exc:
            if not is_infrastructure(exc):
                raise
            log.info("engine %s: its record stays until it is pruned (%s)", self._id, exc)

    def _interval(self) -> timedelta:
        return timedelta(seconds=self._lease() / BEATS_PER_LEASE)


def judged(engines: Iterable[EngineInfo], now: datetime) -> list[EngineInfo]:
    """The records with ``alive`` as of ``now``: beaten within three of their leases."""
    return [
        replace(e, alive=(now - e.last_beat_at).total_seconds() <= GONE_AFTER_LEASES * e.lease)
        for e in engines
    ]


def unserved(
    active: dict[tuple[str, str], int], engines: Iterable[EngineInfo]
) -> dict[tuple[str, str], int]:
    """The active run counts of the codes no live engine among ``engines`` serves."""
    served = {pair for e in engines if e.alive for pair in e.serves}
    return {code: n for code, n in active.items() if code not in served}


__all__ = ["GONE_AFTER_LEASES", "PRUNE_AFTER", "Presence", "judged", "unserved"]
