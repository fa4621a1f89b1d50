"""Updates: a request sent into a running workflow and answered by its body.

``engine.update`` sends an update as a signal of the run, buffered under a name of its own
(``$update:<name>``, see ``models.buffered_name``) with an id the caller chose, so it is
delivered durably the way a signal is: a run not waiting for it yet takes it when it waits, and
a replay takes the same one. The body takes it with ``ctx.wait_for_update`` (a record of kind
``update`` holding its id and payload) and answers with ``ctx.reply`` (a record of kind
``reply`` whose input names the update, written before ``reply`` returns, so a replay finds it
and never answers again).

The caller learns the answer from the store alone (``Store.get_reply``): the reply record, or
the run's end without one. The instance whose turn wrote the reply or settled the run tells its
own callers at once (:class:`Answers`); a caller on another instance finds it by polling, every
``POLL_FIRST`` seconds at first and at most every ``POLL_MOST``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import StoreUnavailableError, UpdateRejectedError
from .faults import is_infrastructure, unavailable
from .models import JSON, UPDATE_SIGNALS, Run, StepRecord, StepStatus
from .stores.base import Store

POLL_FIRST = 0.01
"""Seconds before a caller on another instance than the reply's first reads the store again;
each read doubles it, up to ``POLL_MOST``."""

POLL_MOST = 0.25
"""The longest a caller waits between two reads: the latency of an answer written by another
instance, at worst."""


@dataclass(frozen=True)
class Update:
    """An update the workflow took (``ctx.wait_for_update``): answer it with ``ctx.reply``.

    ``name`` and ``payload`` are what ``engine.update`` sent; ``id`` is that call's own."""

    name: str
    payload: JSON
    id: str


def new_update(name: object, payload: JSON) -> Update:
    """An update to send: its name checked, a fresh id."""
    return Update(update_name(name), payload, uuid.uuid4().hex)


def update_name(name: object) -> str:
    """An update's name: a non-empty string."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an update needs a name (a non-empty string), got {name!r}")
    return name


def signal_name(name: str) -> str:
    """A signal's name, refused when it would be taken for an update's."""
    if isinstance(name, str) and name.startswith(UPDATE_SIGNALS):
        raise ValueError(
            f"signal names beginning with {UPDATE_SIGNALS!r} are the updates': {name!r}"
        )
    return name


def delivered(update: Update) -> JSON:
    """What the update's signal carries."""
    return {"id": update.id, "payload": update.payload}


def taken(name: str, message: JSON) -> Update:
    """The update a wait took, from what its signal carried (as its record keeps it)."""
    fields = message if isinstance(message, dict) else {}
    return Update(name, fields.get("payload"), str(fields.get("id", "")))


class Answers:
    """The ``engine.update`` callers of one engine, told when a turn here answered an update of
    their run or settled it: each then reads the store at once instead of at its next poll."""

    def __init__(self) -> None:
        self._listeners: dict[str, set[asyncio.Event]] = {}

    def listen(self, run_id: str) -> asyncio.Event:
        heard = asyncio.Event()
        self._listeners.setdefault(run_id, set()).add(heard)
        return heard

    def forget(self, run_id: str, heard: asyncio.Event) -> None:
        listeners = self._listeners.get(run_id)
        if listeners is not None:
            listeners.discard(heard)
            if not listeners:
                del self._listeners[run_id]

    def notify(self, run_ids: Iterable[str]) -> None:
        if not self._listeners:
            return
        for run_id in run_ids:
            for heard in self._listeners.pop(run_id, ()):
                heard.set()

    async def wait(self, store: Store, run_id: str, update: Update, timeout: float | None) -> JSON:
        """The reply to ``update``, once the run has answered it; ``UpdateRejectedError`` when
        it rejected it or ended without answering; ``TimeoutError`` after ``timeout`` seconds
        (None: no limit; the update stays delivered either way)."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        pause = POLL_FIRST
        while True:
            # Listen before reading, so an answer written between the two is not missed.
            heard = self.listen(run_id)
            try:
                answer, outage = await _look(store, run_id, update)
                if answer is not None:
                    return _outcome(answer, run_id, update)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _expired(run_id, update, timeout, outage)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(heard.wait(), min(pause, left))
            finally:
                self.forget(run_id, heard)
            pause = min(POLL_MOST, pause * 2)


async def _look(
    store: Store, run_id: str, update: Update
) -> tuple[StepRecord | Run | None, Exception | None]:
    """What the store says of the update now; or nothing, and the outage that kept it from
    saying (the caller reads again later)."""
    try:
        return await _answer(store, run_id, update), None
    except Exception as exc:
        if not is_infrastructure(exc):
            raise
        return None, exc


async def _answer(store: Store, run_id: str, update: Update) -> StepRecord | Run | None:
    """The reply record; or the run, when it ended without one; or None while it may still
    answer (a run gone is a rejection). The run is read first: no reply is written after the
    run's end, so a reply read after the run was seen ended would have been there already."""
    run = await store.get_run(run_id)
    reply = await store.get_reply(run_id, update.id)
    if reply is not None:
        return reply
    if run is None:
        raise UpdateRejectedError(run_id, update.name, f"run {run_id!r} no longer exists")
    return run if run.is_terminal else None


def _outcome(answer: StepRecord | Run, run_id: str, update: Update) -> JSON:
    if isinstance(answer, Run):
        raise UpdateRejectedError(
            run_id,
            update.name,
            f"run {run_id!r} ended {answer.status} without answering update {update.name!r}",
        )
    if answer.status == StepStatus.COMPLETED:
        return answer.output
    reason = (answer.error or {}).get("message") or "rejected"
    raise UpdateRejectedError(run_id, update.name, str(reason))


def _expired(
    run_id: str, update: Update, timeout: float | None, outage: Exception | None
) -> Exception:
    if isinstance(outage, StoreUnavailableError):
        return outage
    if outage is not None:
        return unavailable(outage)
    return TimeoutError(
        f"update {update.name!r} of run {run_id!r} not answered within {timeout:g}s"
        " (it stays delivered)"
    )


__all__ = [
    "Answers",
    "Update",
    "delivered",
    "new_update",
    "signal_name",
    "taken",
    "update_name",
]
