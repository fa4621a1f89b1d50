"""The runs watched until they settle: what ``wait_for_run`` callers of one engine hear of the
runs its turns settle.

A caller waiting for a run a turn of this engine executes gets the run as the turn settled it,
without a read. A run that completed here a moment before its caller came to wait (the caller
started a batch, then waits for each) is kept for a few seconds, so that wait needs no read
either. Only ``completed`` runs are kept: they never change again (a failed, dead or cancelled
run may be requeued), so the kept run is the stored one.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from .models import Run, RunStatus

KEPT_SECONDS = 10.0  # how long a run completed here is kept for a late waiter
KEPT_MOST = 10_000  # completed runs kept, at most


class RunWatchers:
    """The ``wait_for_run`` callers of one engine: a future per run, resolved with the run as
    a turn here settled it, or with None when it settled elsewhere (read it then)."""

    def __init__(self, also: Callable[[list[str]], None] | None = None) -> None:
        self._futures: dict[str, asyncio.Future[Run | None]] = {}
        self._completed: OrderedDict[str, tuple[float, Run]] = OrderedDict()
        self._also = also  # told of every run settled here too (the update callers)

    def listen(self, run_id: str) -> asyncio.Future[Run | None]:
        waiter = self._futures.get(run_id)
        if waiter is None or waiter.done():
            waiter = self._futures[run_id] = asyncio.get_running_loop().create_future()
        return waiter

    def forget(self, run_id: str) -> None:
        self._futures.pop(run_id, None)

    def notify(self, run_ids: Iterable[str], settled: Run | None = None) -> None:
        run_ids = list(run_ids)
        if self._also is not None:
            self._also(run_ids)
        for run_id in run_ids:
            waiter = self._futures.pop(run_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(settled)
        if settled is not None and settled.status == RunStatus.COMPLETED:
            self._keep(settled)

    def completed(self, run_id: str) -> Run | None:
        """The run, if it completed here in the last ``KEPT_SECONDS``."""
        kept = self._completed.get(run_id)
        if kept is None or time.monotonic() - kept[0] > KEPT_SECONDS:
            return None
        return kept[1]

    def _keep(self, run: Run) -> None:
        now = time.monotonic()
        self._completed[run.id] = (now, run)
        self._completed.move_to_end(run.id)
        while self._completed:
            _, (at, _) = next(iter(self._completed.items()))
            if len(self._completed) <= KEPT_MOST and now - at <= KEPT_SECONDS:
                break
            self._completed.popitem(last=False)


__all__ = ["RunWatchers"]
