"""PostgresStore's starts of many runs, gated ones among them, in one round trip.

A batch (``Store.create_runs`` of several specs, none replacing nor forked) is one pipeline,
one implicit transaction: the batch's admission locks first (``lock_keys``, in hash order, so
two batches never wait on each other in a cycle), then each start's own statement, in the
batch's order (``insert_gated`` or ``insert_limited``, as a single start sends it; its locks
are held already). Each statement takes its own snapshot and sees what the earlier ones wrote,
so every start counts the batch's starts before it, as it would count them had they been made
one by one. Ungated specs go together in one ``insert_runs`` ahead of them when no id repeats
(they count toward no key); when one does, every spec has its own statement, in order.

When no two gated specs share an admission key and none has a rate limit or a debounce (the
batch of starts across many keys), no start counts another's, so the order among them cannot
change an outcome: they go together too, in one ``insert_gated_many``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ...models import Lease, RunSpec, Started
from ...serialization import dumps
from .db import Call
from .rows import (
    Row,
    gate_keys,
    gate_params,
    limit_params,
    new_or_found,
    pg_array,
    queue_capacity,
    run_from_row,
    specs_params,
    start_refusal,
    started_by_id,
)


def start_statement(spec: RunSpec, now: datetime, lease: Lease | None = None) -> Call:
    """The statement of one gated start and its parameters: ``insert_limited`` for a start
    under a rate limit or a debounce, else ``insert_gated``."""
    if spec.limited:
        return "insert_limited", {**specs_params([spec], [lease]), **limit_params(spec, now)}
    return "insert_gated", {**specs_params([spec], [lease]), **gate_params(spec, now)}


def gated_outcome(spec: RunSpec, row: Row | None, now: datetime) -> Started | None:
    """What an ``insert_gated`` or ``insert_limited`` row means; None when a concurrent start
    took the id (or folded into the held run, or created it) after the statement began."""
    assert row is not None
    if row["id"] is not None:
        if row.get("folded"):
            return Started(run_from_row(row), created=False, debounced=True)
        # Created blocked: held by its throttle or debounce, or parked behind a full key.
        return new_or_found(row, row["created"] and row["status"] == "blocked")
    refusal = start_refusal(spec, row, now)
    return None if refusal is None else Started(None, created=False, rejected=refusal)


def batch_calls(
    specs: Sequence[RunSpec], now: datetime, offers: Sequence[Lease | None]
) -> list[Call]:
    """The pipeline of a batch: its locks, then its statements (see the module); ``offers``:
    the lease each spec is offered (``base.offered``)."""
    locks: Call = ("lock_keys", {"keys": pg_array(gate_keys(specs)), "run_id": None})
    if len({s.id for s in specs}) < len(specs):
        # A repeated id: each start alone, in order; none claimed (the second finds the first).
        return [locks, *(_statement(spec, now) for spec in specs)]
    plain = [n for n, spec in enumerate(specs) if not spec.gated]
    ahead: list[Call] = []
    if plain:
        ahead = [
            ("insert_runs", specs_params([specs[n] for n in plain], [offers[n] for n in plain]))
        ]
    gated = [(s, o) for s, o in zip(specs, offers, strict=True) if s.gated]
    if _apart([s for s, _ in gated]):
        return [locks, *ahead, _together(gated, now)]
    return [locks, *ahead, *(start_statement(s, now, o) for s, o in gated)]


def batch_outcomes(
    specs: Sequence[RunSpec], results: list[list[Row]], now: datetime
) -> list[Started | None]:
    """Each spec's outcome from the pipeline's results (``batch_calls``' order); None for a
    spec whose id (or held run) a concurrent start took meanwhile: the caller reads it."""
    answers = iter(results[1:])
    if len({s.id for s in specs}) < len(specs):
        return [_outcome(spec, next(answers), now) for spec in specs]
    plain = started_by_id(next(answers)) if any(not s.gated for s in specs) else {}
    gated = [s for s in specs if s.gated]
    rows = iter(next(answers) if _apart(gated) else [_first(next(answers)) for _ in gated])
    return [gated_outcome(s, next(rows), now) if s.gated else plain.get(s.id) for s in specs]


def _apart(gated: Sequence[RunSpec]) -> bool:
    """Whether the gated specs go in one ``insert_gated_many``: two or more, none limited, no
    admission key shared."""
    if len(gated) < 2 or any(s.limited for s in gated):
        return False
    keys = gate_keys(gated)
    return len(set(keys)) == len(keys)


def _together(gated: Sequence[tuple[RunSpec, Lease | None]], now: datetime) -> Call:
    specs = [s for s, _ in gated]
    gates = [
        {"id": s.id, "ord": n, "queue_capacity": queue_capacity(s)} for n, s in enumerate(specs)
    ]
    params = specs_params(specs, [o for _, o in gated])
    return ("insert_gated_many", {**params, "gates": dumps(gates), "now": now})


def _statement(spec: RunSpec, now: datetime) -> Call:
    return start_statement(spec, now) if spec.gated else ("insert_runs", specs_params([spec]))


def _outcome(spec: RunSpec, rows: list[Row], now: datetime) -> Started | None:
    if spec.gated:
        return gated_outcome(spec, _first(rows), now)
    return started_by_id(rows).get(spec.id)


def _first(rows: list[Row]) -> Row | None:
    return rows[0] if rows else None


__all__ = ["batch_calls", "batch_outcomes", "gated_outcome", "start_statement"]
