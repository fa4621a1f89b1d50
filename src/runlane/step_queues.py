"""Step queues: the admission of steps by rate, concurrency, priority and fairness.

A ``StepQueue`` registered on the engine (``Engine(queues=[...])``) admits the attempts of the
steps that name it (``@step(queue=)`` or ``ctx.step(..., queue=)``), local and remote alike.
The store keeps each queue's settings (every engine sharing it enforces the same numbers) and
its entries: a step waiting for admission, or holding a slot from admission until its attempt
is recorded. Admission is one atomic store operation; a step not admitted suspends its run (no
task, no memory), and a freed slot wakes the next waiters in the write that frees it.

The rules live here once (``admit`` and ``release``, over a store's :class:`QueueBook`); the
memory and SQLite stores keep the book, PostgreSQL states the same rules in SQL.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from .definitions import MAX_LIMIT, RateLimit, as_seconds, whole_limit
from .errors import DefinitionError
from .models import Admission, QueueSettings, RetryTimer

UNLIMITED = 1 << 62
"""The room of a queue with neither a concurrency nor a rate limit."""


@dataclass(frozen=True)
class StepQueue:
    """Admits steps: at most ``rate_limit.limit`` per fixed ``rate_limit.period``-second
    window, then at most ``concurrency`` holding a slot at once; among waiters, higher
    priority first, then (``fairness="key"``) the fairness key served least recently, then
    arrival (``order="fifo"`` oldest first, ``"lifo"`` newest first)."""

    name: str
    concurrency: int | None = None
    rate_limit: RateLimit | None = None  # its limit and period; a step queue's has no key
    fairness: Literal["fifo", "key"] = "fifo"
    order: Literal["fifo", "lifo"] = "fifo"

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.name, str) or not self.name or "\x00" in self.name:
            problems.append("name must be a non-empty string without NUL characters")
        if self.concurrency is not None and not whole_limit(self.concurrency):
            problems.append(f"concurrency must be None or a whole number from 1 to {MAX_LIMIT}")
        if self.rate_limit is not None and not isinstance(self.rate_limit, RateLimit):
            problems.append("rate_limit must be a RateLimit")
        elif self.rate_limit is not None and self.rate_limit.key is not None:
            problems.append(
                "rate_limit has no key in a step queue (fairness_key spreads it over tenants)"
            )
        elif self.rate_limit is not None and self.rate_limit.on_limit != "reject":
            problems.append("rate_limit.on_limit does not apply: a step over the rate waits")
        if self.fairness not in ("fifo", "key"):
            problems.append("fairness must be 'fifo' or 'key'")
        if self.order not in ("fifo", "lifo"):
            problems.append("order must be 'fifo' or 'lifo'")
        if problems:
            raise DefinitionError(f"step queue {self.name!r}: " + "; ".join(problems))

    def settings(self) -> QueueSettings:
        rate = self.rate_limit
        return QueueSettings(
            name=self.name,
            concurrency=self.concurrency,
            rate_limit=None if rate is None else rate.limit,
            rate_period=None if rate is None else as_seconds(rate.period),
            fairness=self.fairness,
            order=self.order,
        )


@dataclass(frozen=True)
class QueueRequest:
    """A step asking its queue for admission: which queue, which step, and its place."""

    queue: str
    seq: int
    priority: int = 0
    fairness_key: str = ""


@dataclass(frozen=True)
class QueueRow:
    """A queue as the store keeps it: its settings, its current rate window (its start and
    the admissions in it) and ``served``, the count of admissions so far (fairness keys
    remember the value of their last one)."""

    settings: QueueSettings
    window_start: datetime | None = None
    window_count: int = 0
    served: int = 0


@dataclass(frozen=True)
class QueueEntry:
    """A step waiting for admission (``admitted_at`` None) or holding a slot. ``id`` is its
    arrival order."""

    id: int
    queue: str
    run_id: str
    seq: int
    priority: int
    fairness_key: str
    admitted_at: datetime | None = None
    denials: int = 0


@dataclass(frozen=True)
class QueueView:
    """A queue as an operator sees it (``Store.queue_views``): its row, the entries of its
    unsettled runs by arrival, and when each of their fairness keys was last served."""

    row: QueueRow
    entries: tuple[QueueEntry, ...]
    served: Mapping[str, int]

    def holders(self) -> list[QueueEntry]:
        return [e for e in self.entries if e.admitted_at is not None]

    def waiters(self) -> list[QueueEntry]:
        """The waiting entries in the order the queue admits them."""
        settings = self.row.settings
        waiting = [e for e in self.entries if e.admitted_at is None]
        return sorted(
            waiting, key=lambda e: order_key(settings, e, self.served.get(e.fairness_key))
        )


class Columns(Protocol):
    """A table row read by column name (a ``sqlite3.Row``, a psycopg dict row)."""

    def __getitem__(self, name: str, /) -> Any: ...


def row_from(values: Columns, window_start: datetime | None) -> QueueRow:
    """A queue row from a table row whose columns are named as the schema names them."""
    settings = QueueSettings(
        name=values["name"],
        concurrency=values["concurrency"],
        rate_limit=values["rate_limit"],
        rate_period=values["rate_period"],
        fairness=values["fairness"],
        order=values["arrival"],
    )
    return QueueRow(settings, window_start, values["window_count"], values["served"])


def entry_from(values: Columns, admitted_at: datetime | None) -> QueueEntry:
    """An entry from a table row whose columns are named as the schema names them."""
    return QueueEntry(
        id=values["id"],
        queue=values["queue"],
        run_id=values["run_id"],
        seq=values["seq"],
        priority=values["priority"],
        fairness_key=values["fairness_key"],
        admitted_at=admitted_at,
        denials=values["denials"],
    )


def views_of(
    rows: Sequence[QueueRow], entries: Sequence[QueueEntry], served: Mapping[tuple[str, str], int]
) -> list[QueueView]:
    """Each queue's view, by name, from its rows, entries (by arrival) and served keys."""
    return [
        QueueView(
            row,
            tuple(e for e in entries if e.queue == row.settings.name),
            {k: n for (q, k), n in served.items() if q == row.settings.name},
        )
        for row in sorted(rows, key=lambda r: r.settings.name)
    ]


def unknown_queue(name: str) -> DefinitionError:
    return DefinitionError(
        f"step queue {name!r} is not registered: pass StepQueue({name!r}, ...) in an"
        " Engine's queues= (any engine sharing the store)"
    )


FALLBACK_HEAD_START = 3
"""A denied step's fallback timer starts this many doublings in (8x ``singleton_retry``): the
write that frees a slot wakes the waiters it is for, durably, so the timer only covers a waker
that died between two writes; short timers would only have every waiter ask again and again."""


def fallback(retry: RetryTimer, now: datetime, denials: int) -> datetime:
    """When a step denied ``denials`` times before asks again, woken or not."""
    return retry.due(now, denials + FALLBACK_HEAD_START)


def window_start(now: datetime, period: float) -> datetime:
    """The start of the fixed rate window ``now`` falls in (windows are aligned on the epoch)."""
    seconds = now.timestamp()
    return datetime.fromtimestamp(seconds - math.fmod(seconds, period), UTC)


def current_window(row: QueueRow, now: datetime) -> tuple[datetime | None, int]:
    """The queue's rate window at ``now`` and its admissions so far (a new window has none)."""
    period = row.settings.rate_period
    if row.settings.rate_limit is None or period is None:
        return None, 0
    start = window_start(now, period)
    if row.window_start is not None and row.window_start >= start:
        return row.window_start, row.window_count
    return start, 0


def room(row: QueueRow, holders: int, window_count: int) -> int:
    """How many more steps the queue may admit now: the least of its free slots and what is
    left of its rate window."""
    settings = row.settings
    free = UNLIMITED if settings.concurrency is None else settings.concurrency - holders
    left = UNLIMITED if settings.rate_limit is None else settings.rate_limit - window_count
    return max(0, min(free, left))


def order_key(settings: QueueSettings, entry: QueueEntry, served: int | None) -> tuple[int, ...]:
    """Waiters sort by this: higher priority, then (``fairness="key"``) the key served least
    recently (never served first), then arrival (newest first with ``order="lifo"``)."""
    fairness = (-1 if served is None else served) if settings.fairness == "key" else 0
    arrival = -entry.id if settings.order == "lifo" else entry.id
    return (-entry.priority, fairness, arrival)


class QueueBook(Protocol):
    """A store's queue tables, inside the transaction of one store operation."""

    def queue(self, name: str) -> QueueRow | None:
        """The queue, locked for the rest of the operation (admissions of one queue queue)."""
        ...

    def entry(self, run_id: str, seq: int) -> QueueEntry | None: ...

    def add_entry(self, run_id: str, request: QueueRequest, now: datetime) -> QueueEntry:
        """Insert a waiting entry, its arrival after every entry so far."""
        ...

    def holders(self, queue: str) -> int:
        """Entries of the queue holding a slot, of runs not yet settled."""
        ...

    def first_waiting(self, row: QueueRow, count: int) -> list[QueueEntry]:
        """The first ``count`` waiting entries of runs not yet settled nor paused (a paused run
        waits in no line), by ``order_key``."""
        ...

    def save_admitted(self, entry: QueueEntry, row: QueueRow, now: datetime) -> None:
        """Record the admission: the entry holds a slot from ``now``, the queue row as given
        (window and ``served`` moved on), and its fairness key last served at ``row.served``."""
        ...

    def save_denied(self, entry: QueueEntry) -> None:
        """Count one more denial of the entry."""
        ...

    def mark_queued(self, run_id: str) -> None:
        """The run has entered a step queue: its settlement releases its entries."""
        ...

    def drop_entries(
        self, run_id: str, seqs: Collection[int] | None, *, lost_turn: bool
    ) -> set[str]:
        """Delete the run's entries (those at ``seqs``; None: all; with ``lost_turn``, only the
        slots a lost turn held: see ``release``); the queues they were in (a freed slot, or a
        first place in line, may now be another waiter's)."""
        ...

    def wake(self, run_ids: Sequence[str], now: datetime) -> list[str]:
        """Wake these runs as any wake does; the ids of those that are not settled."""
        ...


def admit(
    book: QueueBook, run_id: str, request: QueueRequest, now: datetime, retry: RetryTimer
) -> Admission:
    """Admit the step ``request`` names, or tell when to ask again (see ``Store.admit_step``)."""
    row = book.queue(request.queue)
    if row is None:
        raise unknown_queue(request.queue)
    book.mark_queued(run_id)
    entry = book.entry(run_id, request.seq) or book.add_entry(run_id, request, now)
    if entry.admitted_at is not None:
        return Admission(True)
    start, count = current_window(row, now)
    free = room(row, book.holders(row.settings.name), count)
    first = book.first_waiting(row, free) if free else []
    if any(e.id == entry.id for e in first):
        served = row.served + 1
        book.save_admitted(
            entry, QueueRow(row.settings, start, count + 1 if start else 0, served), now
        )
        return Admission(True)
    book.save_denied(entry)
    limit, period = row.settings.rate_limit, row.settings.rate_period
    if start is not None and limit is not None and period is not None and count >= limit:
        again = start + timedelta(seconds=period)  # the next window
    else:
        again = fallback(retry, now, entry.denials)
    # Whoever the free room is for is woken: it may be parked on its fallback timer.
    ahead = [e.run_id for e in first if e.run_id != run_id]
    return Admission(False, again, tuple(book.wake(ahead, now)))


def admitted(admission: Admission, released: Sequence[str]) -> Admission:
    """``admission`` with the runs a release in the same write woke among its ``woken``."""
    if not released:
        return admission
    woken = tuple(dict.fromkeys([*released, *admission.woken]))
    return Admission(admission.admitted, admission.retry_at, woken)


def release(
    book: QueueBook,
    run_id: str,
    seqs: Collection[int] | None,
    now: datetime,
    *,
    lost_turn: bool = False,
) -> list[str]:
    """Free the run's entries (at ``seqs``, or all) and wake the waiters the room of their
    queues is for now; the ids woken (the run itself left out: it sees its own entries when it runs).

    ``lost_turn``: the run is recovered after its turn's lease expired, and only the slots that
    turn held go (its replay asks again). A remote attempt the turn sent keeps its slot: its
    record is ``running``, a worker may still be executing it, and its result (or its timeout)
    frees it as it would have."""
    woken: list[str] = []
    for name in sorted(book.drop_entries(run_id, seqs, lost_turn=lost_turn)):
        row = book.queue(name)
        if row is None:
            continue
        _, count = current_window(row, now)
        free = room(row, book.holders(name), count)
        nexts = [e.run_id for e in book.first_waiting(row, free)] if free else []
        woken.extend(w for w in book.wake(nexts, now) if w != run_id and w not in woken)
    return woken


__all__ = ["QueueRequest", "StepQueue", "admit", "fallback", "release"]
