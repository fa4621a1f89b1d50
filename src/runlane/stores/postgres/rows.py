"""PostgresStore's statements and the translation between its rows and runlane's records."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ... import admission
from ...attributes import AttributeValue
from ...models import (
    AuditEntry,
    Claim,
    EngineInfo,
    Event,
    LaneMember,
    Lease,
    RetryTimer,
    Run,
    RunQuery,
    RunSpec,
    RunStatus,
    Serves,
    Settlement,
    Signal,
    Started,
    StepRecord,
    StoredSchedule,
    WindowFire,
    Writes,
    evolved,
)
from ...serialization import dumps
from ...sqlfiles import named_statements
from .. import rows as shared

Row = dict[str, Any]
_NO_WRITES = Writes()


def load_queries() -> dict[str, str]:
    """The statements of ``sql/queries.sql``, by their ``-- name:``."""
    return named_statements("runlane.stores.postgres", "sql", "queries.sql")


def pg_array(values: Iterable[str | int]) -> str:
    """A ``text[]`` or ``bigint[]`` parameter as PostgreSQL's array literal (the SQL casts it).

    psycopg's list dumper works out the element type of every list it sends, in Python, each
    time: a tenth of the client CPU of a gated start. A string goes as it is.
    """
    return "{" + ",".join(_array_element(v) for v in values) + "}"


def _array_element(value: str | int) -> str:
    if isinstance(value, int):
        return str(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@functools.lru_cache(maxsize=64)
def served_params(serves: Serves | None) -> Mapping[str, str | None]:
    """The ``served`` and ``codes`` fragments' parameters: the codes an engine serves as two
    parallel array literals (None: every code). Made once per set of codes (an engine's set
    never changes), not at every claim."""
    if serves is None:
        return _EVERY_CODE
    return {"workflows": pg_array(serves.workflows), "versions": pg_array(serves.versions)}


_EVERY_CODE: Mapping[str, str | None] = {"workflows": None, "versions": None}


def engine_params(info: EngineInfo) -> Row:
    """``announce_engine``'s parameters."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "namespace": info.namespace,
        "started_at": info.started_at,
        "last_beat_at": info.last_beat_at,
        "lease": info.lease,
        "serves": dumps([list(pair) for pair in info.serves]),
        "groups": dumps(list(info.groups)),
    }


def engine_from_row(row: Row) -> EngineInfo:
    return EngineInfo(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        namespace=row["namespace"],
        started_at=row["started_at"],
        last_beat_at=row["last_beat_at"],
        lease=row["lease"],
        serves=tuple((str(w), str(v)) for w, v in row["serves"]),
        groups=tuple(str(g) for g in row["groups"]),
    )


def audit_params(entry: AuditEntry) -> dict[str, Any]:
    """``append_audit``'s parameters."""
    return {
        "at": entry.at,
        "actor": entry.actor,
        "source": entry.source,
        "action": entry.action,
        "outcome": entry.outcome,
        "run_id": entry.run_id,
        "namespace": entry.namespace,
        "detail": entry.detail,
    }


def json_param(value: Any) -> str | None:
    """A JSON value as statement text; None stays SQL NULL (it reads back as None either way)."""
    return None if value is None else dumps(value)


def specs_params(specs: Sequence[RunSpec], leases: Sequence[Lease | None] = ()) -> Row:
    """The parameters of ``spec_rows``: the specs as one JSON document (JSON values as JSON
    text inside it), and their ids. ``leases``: the lease each spec is offered (none past its
    end)."""
    offers = [*leases, *([None] * (len(specs) - len(leases)))]
    rows = [
        {
            "id": s.id,
            "workflow": s.workflow,
            "version": s.version,
            "input": json_param(s.input),
            "tags": dumps(list(s.tags)),
            "created_at": _iso(s.created_at),
            "parent_id": s.parent_id,
            "namespace": s.namespace,
            "priority": s.priority,
            "singleton_key": s.singleton.key if s.singleton else None,
            "singleton_limit": s.singleton.limit if s.singleton else None,
            "concurrency_key": s.quota.key if s.quota else None,
            "concurrency_limit": s.quota.limit if s.quota else None,
            "concurrency_statuses": sorted(s.quota.count_statuses) if s.quota else None,
            "deadline_at": _iso(s.deadline_at),
            "lease_owner": lease.owner if lease else None,
            "lease_until": _iso(lease.until) if lease else None,
            "wait_first": s.singleton.retry if s.singleton and not s.singleton.replace else None,
            "forked_from": dumps(list(s.forked_from)) if s.forked_from else None,
            "detached": s.detached,
            "attributes": dumps(dict(s.attributes)) if s.attributes else None,
        }
        for s, lease in zip(specs, offers, strict=True)
    ]
    return {"specs": dumps(rows), "ids": pg_array(s.id for s in specs)}


def retry_params(retry: RetryTimer) -> Row:
    """A waiter's retry timer, as ``blocked_set`` computes it."""
    return {"retry_first": retry.first, "retry_most": retry.most, "retry_jitter": retry.jitter}


def timers_param(timers: Mapping[str, RetryTimer]) -> str:
    """``park_full_waiters``'s ``timers``: each run's fallback timer, as ``retry_params``."""
    return dumps([{"id": run_id, **retry_params(t)} for run_id, t in timers.items()])


def fires_param(fires: Sequence[WindowFire]) -> str:
    """``schedule_moves``'s ``fires``: the compare-and-sets as one JSON document."""
    rows = [
        {
            "schedule_id": f.schedule_id,
            "expected": _iso(f.expected),
            "next_window": _iso(f.next_window),
            "next_fire": _iso(f.next_fire),
            "run_id": f.spec.id if f.spec is not None else None,
        }
        for f in fires
    ]
    return dumps(rows)


def fenced_params(
    run_id: str, owner: str | None, writes: Writes, *, allow_cancelling: bool = False
) -> Row:
    """The parameters of ``fenced_writes``: the fence, and the records as one JSON document."""
    return {
        "id": run_id,
        "owner": owner,
        "allow_cancelling": allow_cancelling,
        "steps": dumps(step_documents(writes)),
        "signal_ids": pg_array(writes.consumed_signals),
    }


def history_params(spec: RunSpec) -> Row:
    """The parameters of ``insert_history``: a fork's id and its copied records."""
    return {"id": spec.id, "steps": dumps(step_documents(Writes(steps=list(spec.history))))}


Checkpoint = tuple[str, str, Writes, datetime]  # a run's id, its lease owner, records, now


def checkpoints_params(batch: Sequence[Checkpoint]) -> Row:
    """The parameter of ``checkpoint_many``: each run's fence, time and records, one document."""
    given = [
        {
            "id": run_id,
            "owner": owner,
            "now": _iso(now),
            "steps": step_documents(writes),
            "signal_ids": pg_array(writes.consumed_signals),
        }
        for run_id, owner, writes, now in batch
    ]
    return {"batch": dumps(given)}


Settling = tuple[str, str, Writes, Settlement, datetime]  # id, lease owner, records, outcome, now


def settlements_params(batch: Sequence[Settling]) -> Row:
    """The parameters of ``settle_many``: each run's fence, records and outcome, one document;
    its parents are woken at the latest ``now`` of the batch."""
    given = [
        {
            "id": run_id,
            "owner": owner,
            "now": _iso(now),
            "steps": step_documents(writes),
            "status": str(settlement.status),
            "output": json_param(settlement.output),
            "error": json_param(settlement.error),
        }
        for run_id, owner, writes, settlement, now in batch
    ]
    return {"batch": dumps(given), "now": max(now for *_, now in batch)}


def settle_params(
    run_id: str,
    owner: str | None,
    settlement: Settlement,
    now: datetime,
    writes: Writes = _NO_WRITES,
    successor: Lease | None = None,
) -> Row:
    """``settle``'s parameters; ``owner=None`` settles outside a turn (no lease to check)."""
    return {
        # A cancelled run settles only as cancelled: its turn's other outcome is discarded.
        **fenced_params(
            run_id,
            owner,
            writes,
            allow_cancelling=owner is None or settlement.status == RunStatus.CANCELLED,
        ),
        "status": str(settlement.status),
        "output": json_param(settlement.output),
        "error": json_param(settlement.error),
        "now": now,
        "successor": successor.owner if successor else None,
        "successor_until": successor.until if successor else None,
        **served_params(successor.serves if successor else None),
    }


def started_by_id(rows: list[Row]) -> dict[str, Started]:
    """An ``insert_runs`` result: the new runs and the existing ones, by id."""
    return {row["id"]: new_or_found(row) for row in rows}


def new_or_found(row: Row, waiting: bool = False) -> Started:
    """A created or existing run; a run created already leased comes with its claim."""
    run = run_from_row(row)
    if not row["created"] or run.status != RunStatus.RUNNING:
        return Started(run, created=row["created"], waiting=waiting)
    return Started(_as_created(run), created=True, claim=Claim(run, [], []))


def _as_created(run: Run) -> Run:
    """A run created already leased, as its start reports it (the claim carries the lease)."""
    return evolved(
        run, status=RunStatus.PENDING, lease_owner=None, lease_expires_at=None, holds_slot=False
    )


def step_documents(writes: Writes) -> list[dict[str, Any]]:
    """The step records of ``writes`` as ``step_columns`` reads them."""
    return [
        {
            "seq": r.seq,
            "name": r.name,
            "kind": str(r.kind),
            "status": str(r.status),
            "input": json_param(r.input),
            "output": json_param(r.output),
            "error": json_param(r.error),
            "attempts": r.attempts,
            "started_at": _iso(r.started_at),
            "finished_at": _iso(r.finished_at),
            "last_heartbeat_at": _iso(r.last_heartbeat_at),
            "wake_at": _iso(r.wake_at),
            "dispatches": r.dispatches,
            "fence": r.fence,
        }
        for r in writes.steps
    ]


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _same(value: Any) -> Any:
    return value


# psycopg decodes jsonb, text[] and timestamptz itself.
_DECODE = shared.Decode(json=_same, instant=_same, moment=_same)


def audit_from_row(row: Row) -> AuditEntry:
    return shared.audit_from_row(row, _DECODE)


def lane_member_from_plain(row: tuple[Any, ...]) -> LaneMember:
    """A ``lane_members`` row, its columns in the statement's order: kind, name, id,
    workflow, status, created_at, holds, place, total, lane_limit."""
    kind, name, run_id, workflow, status, created_at, holds, place, total, limit = row
    return LaneMember(kind, name, run_id, workflow, shared.STATUS_OF[status], created_at,
                      holds, place, total, limit)  # fmt: skip


def run_from_row(row: Row) -> Run:
    return shared.run_from_row(row, _DECODE)


def schedule_from_row(row: Row) -> StoredSchedule:
    return shared.schedule_from_row(row, _DECODE)


def step_from_row(row: Row) -> StepRecord:
    return shared.step_from_row(row, _DECODE)


def signal_from_row(row: Row) -> Signal:
    return shared.signal_from_row(row, _DECODE)


def event_from_row(row: Row) -> Event:
    return shared.event_from_row(row, _DECODE)


def claimable(row: Row, now: datetime, handoff: bool = False) -> bool:
    """Whether a locked run row may be claimed now (see ``Store.claim_run``)."""
    status = row["status"]
    if status == RunStatus.PENDING:
        return True
    if status in (RunStatus.SUSPENDED, RunStatus.BLOCKED):
        begun = row["begin_at"] is None or row["begin_at"] <= now  # a hand-off never begins
        return (handoff and begun) or (row["wake_at"] is not None and row["wake_at"] <= now)
    if status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        return row["lease_expires_at"] is not None and row["lease_expires_at"] <= now
    return False


# The conditions of list_runs and of a RunQuery (page_runs, count_runs): on the run, then on
# its creation time and id, where the cursor is a row comparison that walks the
# (created_at DESC, id DESC) indexes from where the last page ended.
QUERY_FILTERS = {
    "workflow": "workflow = %(workflow)s",
    "status": "status = %(status)s",
    "tag": "tags @> ARRAY[%(tag)s]::text[] AND tags <> '{{}}'",  # runlane_runs_tags's condition ({{}}: format)
    "attributes": "attributes @> %(attributes)s::jsonb",
    "parent_id": "parent_id = %(parent_id)s",
    "namespace": "namespace = %(namespace)s",
}
QUERY_BOUNDS = {
    "created_from": "{created_at} >= %(created_from)s",
    "created_until": "{created_at} < %(created_until)s",
    "after_at": "({created_at}, {id}) < (%(after_at)s, %(after_id)s)",
}


def query_params(query: RunQuery, *, cursor: bool) -> Row:
    """The parameters of ``query``'s given filters, by QUERY_FILTERS name."""
    given: Row = {
        name: getattr(query, name)
        for name in ("workflow", "tag", "created_from", "created_until", "namespace")
        if getattr(query, name) is not None
    }
    if query.status is not None:
        given["status"] = str(query.status)
    given.update(attribute_params(query.attributes))
    if cursor and query.after is not None:
        given.update(after_at=query.after.created_at, after_id=query.after.id)
    return given


def attribute_params(attributes: Mapping[str, AttributeValue] | None) -> Row:
    """The parameters of a filter on ``attributes`` (none without one): all of them, and the
    first, whose entries the listing reads."""
    if not attributes:
        return {}
    first = next(iter(attributes.items()))
    return {"attributes": dumps(dict(attributes)), "attribute": dumps(dict([first]))}


def filtered(statement: str, given: Row) -> str:
    """``statement`` with the filters in ``given`` in place: ``{filters}`` is the WHERE clause of
    them all (empty when there is none). A listing by attributes walks the entries of the first
    (``runs_by_attribute``): its ``{run_filters}`` are the conditions on each run, and its
    ``{entry_bounds}`` bound the walk, on the entries' creation time and run id (each condition
    after an ``AND``)."""
    every = [*_conditions(QUERY_FILTERS, given), *_conditions(QUERY_BOUNDS, given)]
    entries = {"created_at": "a.created_at", "id": "a.run_id"}
    return (
        statement.replace("{filters}", f"WHERE {' AND '.join(every)}" if every else "")
        .replace("{run_filters}", _and(_conditions(QUERY_FILTERS, given)))
        .replace("{entry_bounds}", _and(_conditions(QUERY_BOUNDS, given, entries)))
    )


def _conditions(
    conditions: Mapping[str, str], given: Row, columns: Mapping[str, str] | None = None
) -> list[str]:
    """The ``conditions`` that ``given`` has parameters for, on the run's columns or on those
    ``columns`` names."""
    names = columns or {"created_at": "created_at", "id": "id"}
    return [condition.format(**names) for k, condition in conditions.items() if k in given]


def _and(conditions: list[str]) -> str:
    return "".join(f" AND {condition}" for condition in conditions)


def gate_keys(specs: Sequence[RunSpec]) -> list[str]:
    """The admission lock names of the specs' gates, rate limits and debounces (each kind of
    key lives apart)."""
    keys = [f"s:{s.singleton.key}" for s in specs if s.singleton is not None]
    keys += [f"q:{s.quota.key}" for s in specs if s.quota is not None]
    keys += [f"r:{s.rate.key}" for s in specs if s.rate is not None]
    return keys + [f"d:{s.debounce.key}" for s in specs if s.debounce is not None]


def gated(spec: RunSpec) -> bool:
    """Whether a start of ``spec`` counts or locks anything (else it is a plain insert)."""
    return spec.gated


def gate_params(spec: RunSpec, now: datetime) -> Row:
    """The parameters of ``gate_counts`` (which takes the spec's admission locks first), and
    the limits ``insert_gated`` applies to them."""
    quota, singleton = spec.quota, spec.singleton
    return {
        "now": now,
        "run_id": spec.id,
        "run_created_at": spec.created_at,
        "singleton_limit": singleton.limit if singleton else None,
        "lock_keys": pg_array(gate_keys([spec])),
        "quota_key": quota.key if quota else None,
        "quota_statuses": pg_array(sorted(str(s) for s in quota.count_statuses) if quota else []),
        "quota_limit": quota.limit if quota else None,
        "singleton_key": singleton.key if singleton else None,
        "queue_capacity": queue_capacity(spec),
    }


def queue_capacity(spec: RunSpec) -> int | None:
    """How many active runs the spec's singleton key may hold (its slots and its backlog), or
    None for no bound (no key, a replacing one, or no ``max_queue_depth``)."""
    singleton = spec.singleton
    if singleton is None or singleton.replace or singleton.max_queue_depth is None:
        return None
    return singleton.limit + singleton.max_queue_depth


def limit_params(spec: RunSpec, now: datetime) -> Row:
    """The parameters of ``insert_limited`` and ``limit_counts``, the gates' included."""
    rate, debounce = spec.rate, spec.debounce
    timeout = spec.deadline_at - spec.created_at if spec.deadline_at is not None else None
    max_wait = debounce.max_wait if debounce is not None else None
    return {
        **gate_params(spec, now),
        "input": json_param(spec.input),
        "timeout": timeout,
        "rate_key": rate.key if rate else None,
        "rate_limit": rate.limit if rate else None,
        "rate_period": timedelta(seconds=rate.period) if rate else None,
        "delay": rate is not None and rate.delay,
        "wanted": admission.wanted_begin(spec, now),
        "debounce_key": debounce.key if debounce else None,
        "debounce_period": timedelta(seconds=debounce.period) if debounce else None,
        "max_wait": timedelta(seconds=max_wait) if max_wait is not None else None,
    }


def start_refusal(spec: RunSpec, counts: Row, now: datetime) -> Exception | None:
    """The refusal of a start from its counts: its rate limit's first, then its gates'."""
    rate_last = counts.get("rate_last")
    refusal = admission.rate_refusal(spec.workflow, spec.rate, rate_last, now)
    return refusal if refusal is not None else gate_refusal(spec, counts)


def gate_refusal(spec: RunSpec, counts: Row) -> Exception | None:
    if spec.quota is not None:
        refusal = admission.quota_refusal(spec.workflow, spec.quota, counts["quota_active"])
        if refusal is not None:
            return refusal
    if spec.singleton is not None:
        return admission.queue_refusal(spec.workflow, spec.singleton, counts["key_active"])
    return None


def depth_first(root: str, tree: Sequence[Row]) -> list[str]:
    """The tree's ids parents first, each run's children oldest first (as MemoryStore walks)."""
    children: dict[str, list[str]] = {}
    for row in tree:
        if row["id"] != root and row["parent_id"] is not None:
            children.setdefault(row["parent_id"], []).append(row["id"])
    order: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children.get(node, [])))
    return order


def utc_conninfo(url: str) -> str:
    """``url`` with the store's session settings: time zone UTC (timestamps read back in UTC),
    generic plans (see ``Database``), no JIT compilation (the store's statements touch a few
    rows each, and a cost misestimate would compile one for hundreds of milliseconds), no
    sequential scans where an index serves (a connection plans each statement once, often
    while the tables are still empty, and such a plan would scan runlane_runs for as long as
    the connection lives, or until autovacuum's first ANALYZE), no parallel workers (a generic
    plan guesses a third of the table for ``col > $1``, so a read of a few rows would start
    workers on every call), and that the session writes
    the entries of the runs' attributes itself (``runlane.attribute_entries``: the trigger that
    writes them for engines of an earlier version stays still, see migration 0023)."""
    params = conninfo_to_dict(url)
    settings = (
        "-c TimeZone=UTC -c plan_cache_mode=force_generic_plan -c jit=off -c enable_seqscan=off"
        " -c max_parallel_workers_per_gather=0 -c runlane.attribute_entries=on"
    )
    options = f"{params.get('options') or ''} {settings}".strip()
    return make_conninfo("", **{**params, "options": options})


__all__ = [
    "QUERY_BOUNDS",
    "QUERY_FILTERS",
    "Checkpoint",
    "Row",
    "attribute_params",
    "audit_from_row",
    "audit_params",
    "checkpoints_params",
    "claimable",
    "depth_first",
    "engine_from_row",
    "engine_params",
    "event_from_row",
    "fenced_params",
    "filtered",
    "gate_keys",
    "gate_params",
    "gate_refusal",
    "gated",
    "history_params",
    "json_param",
    "lane_member_from_plain",
    "limit_params",
    "load_queries",
    "new_or_found",
    "query_params",
    "retry_params",
    "run_from_row",
    "schedule_from_row",
    "served_params",
    "settle_params",
    "signal_from_row",
    "specs_params",
    "start_refusal",
    "started_by_id",
    "step_from_row",
    "timers_param",
    "utc_conninfo",
]
