"""Group commit of a PostgreSQL store's plain writes: checkpoints and settlements.

Writes made while one is in flight wait for it, then go together (``GroupCommit``): the
checkpoints in one ``checkpoint_many`` (``checkpoint`` when alone), the settlements in one
``settle_many`` (``settle`` when alone), both in one pipeline when both are there: one round
trip and one commit for all. Each run is still fenced on its own by its statement, and a fence
that fails fails its own write only.

Plain means nothing to lock or count: checkpoints without child runs, and settlements of runs
without a singleton key, queue, continuation or handler (the store sends the others by
themselves). Starts do not wait here: a start goes at once on a connection of its own, so an
application's ``start`` costs one round trip whatever the engine is writing. A statement that
fails on a value (never an outage) sends each write again alone, so the one at fault fails
alone and the others go ahead.

Settlements of runs with a singleton key and nothing else to write (no child, continuation,
handler or step queue) have a group of their own (``KeyedSettlements``): every key lock of the
group first (``lock_keys_of_runs``, hash order), then each one's ``settle``, in one round trip
and one commit. They are apart from the plain writes, which never wait for a key lock.

Two keyed groups may be in flight at once (``KEYED_IN_FLIGHT``), each on its own connection.
A group's settles run one after another in one backend, so with a single group every hand-off
of every key waited for one server process while the other core idled; two cut the batched
per-key workload by about a tenth (benchmarks/notes.md), three or four no further. A
settlement goes in the first group while nothing waits there (it goes alone, or next), so
writes that come one by one group as before; once writes wait there, it goes in the group with
the fewest in flight or waiting. Two groups never wait on each other's keys in a cycle: each
takes its keys' locks first, in hash order, then the rows of the parents its settlements wake,
in id order (``lock_parents_of_runs``); two settlements of one key are kept apart by its lock
whichever groups they are in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import psycopg

from ...errors import LeaseLostError, RunCancelling, RunPausing, StoreUnavailableError
from ...models import Settlement, Writes
from .db import Call, Database, GroupCommit
from .rows import (
    Checkpoint,
    Row,
    Settling,
    checkpoints_params,
    fenced_params,
    pg_array,
    settle_params,
    settlements_params,
)

W = TypeVar("W")


@dataclass
class GroupedSettlement:
    """A grouped settlement's outcome: the runs it woke, and whether the run had entered a
    step queue (its entries then go after it: ``_release_settled``)."""

    woken: list[str]
    queued: bool


@dataclass(frozen=True, slots=True)
class CheckpointWrite:
    checkpoint: Checkpoint


@dataclass(frozen=True, slots=True)
class SettleWrite:
    settling: Settling


Write = CheckpointWrite | SettleWrite
Outcome = GroupedSettlement | None  # a settlement's, a checkpoint's


class PlainWrites:
    """The group commit of a store's plain writes (see the module)."""

    def __init__(self, db: Database, most: int) -> None:
        self._db = db
        self._group: GroupCommit[Write, Outcome] = GroupCommit(self._flush, most)

    async def checkpoint(self, run_id: str, owner: str, writes: Writes, now: datetime) -> None:
        await self._group(CheckpointWrite((run_id, owner, writes, now)))

    async def settle(
        self, run_id: str, owner: str, writes: Writes, settlement: Settlement, now: datetime
    ) -> GroupedSettlement:
        grouped = await self._group(SettleWrite((run_id, owner, writes, settlement, now)))
        assert isinstance(grouped, GroupedSettlement)
        return grouped

    async def _flush(self, batch: list[Write]) -> list[Outcome | Exception]:
        checkpoints = [
            (i, w.checkpoint) for i, w in enumerate(batch) if isinstance(w, CheckpointWrite)
        ]
        settlings = [(i, w.settling) for i, w in enumerate(batch) if isinstance(w, SettleWrite)]
        kinds: list[tuple[_Kind[Any], Sequence[tuple[int, Any]]]] = [
            (_CHECKPOINTS, checkpoints),
            (_SETTLINGS, settlings),
        ]
        groups = [
            (kind, [i for i, _ in items], [w for _, w in items]) for kind, items in kinds if items
        ]
        calls = [kind.make(writes) for kind, _, writes in groups]
        outcomes: dict[int, Outcome | Exception] = {}
        try:
            if len(calls) == 1:
                results = [await self._db.rows(calls[0][0], **calls[0][1])]
            else:
                results = await self._db.batch(*calls)
        except StoreUnavailableError:
            raise
        except psycopg.Error as failed:
            if len(batch) == 1:
                return [failed]
            # A value failed its statement (and the pipeline with it): each write alone, so
            # only the one at fault fails.
            for kind, indices, writes in groups:
                for i, write in zip(indices, writes, strict=True):
                    outcomes[i] = await self._alone(kind, write)
        else:
            for (kind, indices, writes), rows in zip(groups, results, strict=True):
                outcomes.update(zip(indices, kind.read(writes, rows), strict=True))
        return [outcomes[i] for i in range(len(batch))]

    async def _alone(self, kind: _Kind[Any], write: Any) -> Outcome | Exception:
        name, params = kind.make([write])
        try:
            [outcome] = kind.read([write], await self._db.rows(name, **params))
        except StoreUnavailableError:
            raise
        except psycopg.Error as failed:
            return failed  # this write's own failure: the others of its group still go
        return outcome


KEYED_IN_FLIGHT = 2
"""How many groups of keyed settlements may be in flight at once (see the module)."""

_Keyed = tuple[str, Call, Row]
"""A keyed settlement: its run, its own key-lock call and its ``settle`` parameters."""


class KeyedSettlements:
    """The group commit of settlements under singleton keys (see the module): each one's
    ``settle`` row, as ``settle`` returned it (None when it returned none)."""

    def __init__(self, db: Database, most: int, in_flight: int = KEYED_IN_FLIGHT) -> None:
        self._db = db
        self._groups: tuple[GroupCommit[_Keyed, Row | None], ...] = tuple(
            GroupCommit(self._flush, most) for _ in range(in_flight)
        )

    async def settle(self, run_id: str, lock: Call, params: Row) -> Row | None:
        """Settle ``run_id`` by ``settle`` with ``params`` (``settle_params``), its key locked:
        by ``lock`` (its own ``lock_keys`` call) when it goes alone."""
        first = self._groups[0]
        group = first if first.load() <= 1 else min(self._groups, key=GroupCommit.load)
        return await group((run_id, lock, params))

    async def _flush(self, batch: list[_Keyed]) -> list[Row | Exception | None]:
        if len(batch) == 1:
            return [await self._alone(*batch[0])]
        ids = pg_array(sorted(run_id for run_id, _, _ in batch))
        settles: list[Call] = [("settle", params) for _, _, params in batch]
        try:
            locks: list[Call] = [
                ("lock_keys_of_runs", {"ids": ids}),
                ("lock_parents_of_runs", {"ids": ids}),
            ]
            _, _, *results = await self._db.batch(*locks, *settles)
        except StoreUnavailableError:
            raise
        except psycopg.Error:
            # A value failed its statement (and the group with it): each again alone, so only
            # the one at fault fails.
            return [await self._alone(*keyed) for keyed in batch]
        return [rows[0] if rows else None for rows in results]

    async def _alone(self, _run_id: str, lock: Call, params: Row) -> Row | Exception | None:
        try:
            _, rows = await self._db.batch(lock, ("settle", params))
        except StoreUnavailableError:
            raise
        except psycopg.Error as failed:
            return failed
        return rows[0] if rows else None


@dataclass(frozen=True, slots=True)
class _Kind(Generic[W]):
    """One kind of write: its statement for a group of them, and each one's outcome from the
    statement's rows."""

    make: Callable[[Sequence[W]], Call]
    read: Callable[[Sequence[W], list[Row]], list[Outcome | Exception]]


def _checkpoint_call(checkpoints: Sequence[Checkpoint]) -> Call:
    if len(checkpoints) == 1:
        [(run_id, owner, writes, now)] = checkpoints
        return ("checkpoint", {**fenced_params(run_id, owner, writes), "now": now})
    return ("checkpoint_many", checkpoints_params(checkpoints))


def _checkpointed(checkpoints: Sequence[Checkpoint], rows: list[Row]) -> list[Outcome | Exception]:
    if len(checkpoints) == 1:
        [(run_id, owner, *_)] = checkpoints
        return [_checkpoint_outcome(rows[0] if rows else None, run_id, owner)]
    # A run whose lease was not held has no fence row (``checkpoint_many``: status NULL).
    fenced = {row["id"]: row for row in rows if row["status"] is not None}
    return [
        _checkpoint_outcome(fenced.get(run_id), run_id, owner) for run_id, owner, *_ in checkpoints
    ]


def _checkpoint_outcome(row: Row | None, run_id: str, owner: str) -> Exception | None:
    """A checkpoint's outcome: why it wrote nothing, or (written) that the run was asked to
    pause meanwhile, or None."""
    error = fence_error(row, run_id, owner)
    if error is None and row is not None and row["pausing"]:
        return RunPausing(run_id)
    return error


def _settle_call(settlings: Sequence[Settling]) -> Call:
    if len(settlings) == 1:
        [(run_id, owner, writes, settlement, now)] = settlings
        return ("settle", settle_params(run_id, owner, settlement, now, writes))
    return ("settle_many", settlements_params(settlings))


def _settled(settlings: Sequence[Settling], rows: list[Row]) -> list[Outcome | Exception]:
    if len(settlings) == 1:
        [(run_id, owner, *_)] = settlings
        row = rows[0] if rows else None
        return [fence_error(row, run_id, owner) or grouped(row)]
    # A run whose lease was not held has no fence row: status NULL.
    fenced = {row["id"]: row for row in rows if row["status"] is not None}
    return [
        fence_error(fenced.get(run_id), run_id, owner) or grouped(fenced[run_id])
        for run_id, owner, *_ in settlings
    ]


_CHECKPOINTS = _Kind(_checkpoint_call, _checkpointed)
_SETTLINGS = _Kind(_settle_call, _settled)


# ---------------------------------------------------------------- rows and parameters


def fence_error(row: Row | None, run_id: str, owner: str | None) -> Exception | None:
    """Why a fenced statement wrote nothing (its row shows it), or None if it wrote."""
    if row is None:
        return LeaseLostError(f"lease on run {run_id!r} is no longer held by {owner}")
    if not row["written"]:
        # Only a cancellation stops a held lease from writing (see ``fenced_writes``).
        return RunCancelling(f"run {run_id!r} was cancelled")
    return None


def grouped(row: Row | None) -> GroupedSettlement:
    """A plain settlement's outcome from its ``settle`` or ``settle_many`` row, once
    ``fence_error`` found it written."""
    assert row is not None
    return GroupedSettlement(woken_by(row), bool(row["fence_queued"]))


def woken_by(settled: Row) -> list[str]:
    """The runs a ``settle`` woke: the key's next waiters, then the parent if it was waiting."""
    parent = [settled["fence_parent_id"]] if settled["parent_woken"] else []
    return [*settled["waiters"], *parent]


__all__ = [
    "GroupedSettlement",
    "KeyedSettlements",
    "PlainWrites",
    "fence_error",
    "grouped",
    "woken_by",
]
