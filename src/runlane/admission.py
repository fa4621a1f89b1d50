"""Singleton, quota, rate limit and debounce policy: pure decisions over what a store read.

Stores call these inside the one atomic operation that reads the counts and writes the result,
so the policy is written once and every backend applies it the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from .definitions import Concurrency, WorkflowDefinition, as_seconds
from .errors import (
    ConcurrencyLimitError,
    KeyFunctionError,
    RateLimitError,
    SingletonQueueFullError,
)
from .models import (
    JSON,
    DebounceGate,
    QuotaGate,
    RateGate,
    Run,
    RunSpec,
    SingletonGate,
    Started,
)

Gate = TypeVar("Gate", SingletonGate, QuotaGate, RateGate, DebounceGate)


def singleton_gate(definition: WorkflowDefinition, input: JSON) -> SingletonGate | None:
    """The workflow's singleton rule evaluated on a start's input."""
    rule = definition.singleton
    if rule is None:
        return None
    key = gate_key(rule.key, input, definition.name, "singleton")
    if not isinstance(key, str) or not key:
        raise KeyFunctionError(
            definition.name, "singleton", f"the key must be a non-empty string, got {key!r}"
        )
    return SingletonGate(
        lane(rule.scope, definition.name, key),
        rule.limit,
        rule.queue_depth,
        replace=rule.on_busy == "replace",
        user_key=key,
    )


def gate_key(key: Callable[[Any], Any], input: JSON, workflow: str, gate: str) -> Any:
    """What a gate's key function gives for a start's input; when it raises (the input lacks
    what it reads), a ``KeyFunctionError`` naming the workflow and the error, from it."""
    try:
        return key(input)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise KeyFunctionError(workflow, gate, reason) from exc


def lane(scope: str, workflow: str, key: str) -> str:
    """The singleton lane a key names: ``<length of workflow>:<workflow>:<key>`` for a lane of
    one workflow, ``*:<key>`` for a global lane. The length makes the text unambiguous whatever
    the names hold, and a global lane never collides with a workflow's."""
    return f"*:{key}" if scope == "global" else f"{len(workflow)}:{workflow}:{key}"


def rate_gate(definition: WorkflowDefinition, input: JSON) -> RateGate | None:
    """The workflow's rate limit evaluated on a start's input; None when it does not apply."""
    rule = definition.rate_limit
    keyed = None if rule is None else _limit_lane(rule.key, input, "rate limit", definition.name)
    if rule is None or keyed is None:
        return None
    key, user_key = keyed
    return RateGate(key, rule.limit, as_seconds(rule.period), rule.on_limit == "delay", user_key)


def debounce_gate(definition: WorkflowDefinition, input: JSON) -> DebounceGate | None:
    """The workflow's debounce evaluated on a start's input; None when it does not apply."""
    rule = definition.debounce
    keyed = None if rule is None else _limit_lane(rule.key, input, "debounce", definition.name)
    if rule is None or keyed is None:
        return None
    max_wait = None if rule.max_wait is None else as_seconds(rule.max_wait)
    return DebounceGate(keyed[0], as_seconds(rule.period), max_wait)


def _limit_lane(
    key: Callable[[Any], str | None] | None, input: JSON, what: str, workflow: str
) -> tuple[str, str | None] | None:
    """The lane of a rate limit's or debounce's key, and the key as the rule gave it: the
    workflow's own lane for ``key=None``; None when the key function says None (not applied).
    Rate limits and debounces are per workflow, like a singleton of the default scope."""
    if key is None:
        return f"{len(workflow)}:{workflow}", None
    user_key = gate_key(key, input, workflow, what)
    if user_key is None:
        return None
    if not isinstance(user_key, str) or not user_key:
        raise KeyFunctionError(
            workflow, what, f"the key must be a non-empty string or None, got {user_key!r}"
        )
    return lane("workflow", workflow, user_key), user_key


def scoped_key(namespace: str, key: str) -> str:
    """A key of one namespace's own: ``~<length of namespace>:<namespace>:<key>``.

    An engine with ``scope_reads`` stores every key of its runs so (the singleton lane, the
    quota, rate limit and debounce keys): the stores count and lock per stored key, so the
    namespace's key is a lane of its own, apart from another namespace's and from the shared
    one, with no column or query of its own. No shared key reads so: a lane begins with a
    digit or ``*``, and ``quota_gate`` refuses a quota key that does."""
    return f"~{len(namespace)}:{namespace}:{key}"


def key_scope(stored: str) -> tuple[str | None, str]:
    """The namespace a stored key belongs to (None: shared by every namespace) and the key
    without it: what is shown of a key (tags, errors, lanes, metrics)."""
    head, colon, rest = stored.partition(":")
    size = head[1:]
    if not (colon and head.startswith("~") and size.isdigit() and rest[int(size) :][:1] == ":"):
        return None, stored
    return rest[: int(size)], rest[int(size) + 1 :]


def shown_key(stored: str) -> str:
    """A stored key as the rule gave it (without its namespace)."""
    return key_scope(stored)[1]


def scoped_gates(spec: RunSpec, namespace: str) -> RunSpec:
    """``spec`` with every gate's key scoped to ``namespace`` (``scoped_key``); what a key is
    shown as (``user_key``) stays the rule's."""
    return replace(
        spec,
        singleton=_scoped(spec.singleton, namespace),
        quota=_scoped(spec.quota, namespace),
        rate=_scoped(spec.rate, namespace),
        debounce=_scoped(spec.debounce, namespace),
    )


def _scoped(gate: Gate | None, namespace: str | None) -> Gate | None:
    if gate is None or namespace is None:
        return gate
    return replace(gate, key=scoped_key(namespace, gate.key))


def _scoped_like(gate: Gate | None, stored: str | None) -> Gate | None:
    """``gate`` scoped as the stored key ``stored`` is (a run's key, kept by a requeue)."""
    return _scoped(gate, None if stored is None else key_scope(stored)[0])


def lane_parts(lane: str) -> tuple[str | None, str]:
    """A lane's workflow (None for a global lane) and key (without its namespace)."""
    head, _, rest = shown_key(lane).partition(":")
    if head == "*" or not head.isdigit():
        return None, rest
    size = int(head)
    return rest[:size], rest[size + 1 :]


def run_lane_tags(run: Run) -> tuple[str, ...]:
    """The lane tags a gated run was given at its start."""
    tags = []
    if run.singleton_key is not None:
        tags.append(f"singleton:{lane_parts(run.singleton_key)[1]}")
    if run.concurrency_key is not None:
        tags.append(f"concurrency:{shown_key(run.concurrency_key)}")
    return tuple(tags)


def lane_tags(singleton: SingletonGate | None, quota: QuotaGate | None) -> tuple[str, ...]:
    """The tags of a gated run: ``singleton:<key>`` and ``concurrency:<key>``."""
    tags = []
    if singleton is not None:
        tags.append(f"singleton:{singleton.shown_key}")
    if quota is not None:
        tags.append(f"concurrency:{shown_key(quota.key)}")
    return tuple(tags)


async def quota_gate(rule: Concurrency | None, input: JSON, workflow: str) -> QuotaGate | None:
    """A quota rule evaluated on a start's input; None for no rule or a ``None`` key."""
    if rule is None:
        return None
    key = gate_key(rule.key, input, workflow, "concurrency") if callable(rule.key) else rule.key
    if key is None:
        return None
    if not isinstance(key, str):
        raise KeyFunctionError(
            workflow, "concurrency", f"the key must be a string or None, got {key!r}"
        )
    if key_scope(key)[0] is not None:
        raise KeyFunctionError(
            workflow,
            "concurrency",
            f"the key {key!r} reads as a namespace's own key (~<length>:<namespace>:<key>),"
            " which is reserved",
        )
    limit: Any = rule.limit(key) if callable(rule.limit) else rule.limit
    if inspect.isawaitable(limit):
        limit = await limit
    return QuotaGate(key, int(limit), rule.statuses)


async def requeue_gates(
    definition: WorkflowDefinition, run: Run
) -> tuple[QuotaGate | None, SingletonGate | None]:
    """The gates a requeue of ``run`` passes, as a start would.

    The quota is the one the run was admitted under (a per-start override included); a run
    stored before quotas were recorded gets the workflow's rule on its input. The singleton
    backlog is the workflow's rule for the run's own lane. A run's keys of its namespace's own
    (``scoped_key``) stay so, whichever engine requeues it.
    """
    quota = run.quota
    if quota is None and run.concurrency_key is not None:
        rule = await quota_gate(definition.concurrency, run.input, definition.name)
        rule = _scoped_like(rule, run.concurrency_key)
        quota = rule if rule is not None and rule.key == run.concurrency_key else None
    singleton = _scoped_like(singleton_gate(definition, run.input), run.singleton_key)
    if singleton is None or singleton.key != run.singleton_key:
        singleton = None
    return quota, singleton


def refusal_record(refusal: Exception, window: datetime | None) -> dict[str, Any]:
    """A refused schedule window, as its ``last_error``: the refusal's type, message, fields."""
    record: dict[str, Any] = {"type": type(refusal).__name__, "message": str(refusal)}
    for name in ("workflow", "key", "limit", "active", "max_queue_depth", "period", "retry_after"):
        if hasattr(refusal, name):
            record[name] = getattr(refusal, name)
    if window is not None:
        record["window"] = window.isoformat()
    return record


def last_fire(started: Sequence[Started], window: datetime | None) -> tuple[str | None, Any]:
    """A fired window's ``(last_run_id, last_error)`` from what its create did."""
    for result in started:
        if result.rejected is not None:
            return None, refusal_record(result.rejected, window)
        if result.run is not None:
            return result.run.id, None
    return None, None


def quota_refusal(workflow: str, gate: QuotaGate, active: int) -> ConcurrencyLimitError | None:
    """The refusal for a start when ``active`` runs already count against the quota."""
    if gate.limit <= 0 or active >= gate.limit:
        return ConcurrencyLimitError(workflow, shown_key(gate.key), gate.limit, active)
    return None


def queue_refusal(
    workflow: str, gate: SingletonGate, active: int
) -> SingletonQueueFullError | None:
    """The refusal for a start when the key already has ``active`` in-flight + waiting runs."""
    if gate.max_queue_depth is None or gate.replace:
        return None
    if active >= gate.limit + gate.max_queue_depth:
        return SingletonQueueFullError(workflow, gate.shown_key, gate.max_queue_depth)
    return None


def window_opens(gate: RateGate, last: datetime | None) -> datetime | None:
    """When the key's sliding window has room for one more start: ``period`` after ``last``, the
    ``limit``-th most recent start the key counts; None when it counts fewer (room now).

    Starts count at their ``rate_at``, which never goes back in time within a key (a throttle
    hands out later instants only), so a start at ``t`` keeps every window of ``period`` to
    ``limit`` starts exactly when ``t >= last + period``.
    """
    return None if last is None else last + timedelta(seconds=gate.period)


def rate_refusal(
    workflow: str, gate: RateGate | None, last: datetime | None, now: datetime
) -> RateLimitError | None:
    """The refusal of a start over its rate limit (a throttle refuses none)."""
    opens = None if gate is None else window_opens(gate, last)
    if gate is None or gate.delay or opens is None or opens <= now:
        return None
    retry_after = (opens - now).total_seconds()
    return RateLimitError(workflow, gate.user_key, gate.limit, gate.period, retry_after)


def debounce_begin(gate: DebounceGate, now: datetime, first: datetime) -> datetime:
    """When a debounced run begins after a start at ``now``: ``period`` later, but never past
    ``max_wait`` after ``first``, the start that created the run."""
    begin = now + timedelta(seconds=gate.period)
    if gate.max_wait is None:
        return begin
    return min(begin, first + timedelta(seconds=gate.max_wait))


def wanted_begin(spec: RunSpec, now: datetime) -> datetime:
    """When a new run of ``spec`` begins but for its rate limit: now, or after its debounce."""
    return now if spec.debounce is None else debounce_begin(spec.debounce, now, now)


def start_times(
    spec: RunSpec, last: datetime | None, now: datetime
) -> tuple[datetime | None, datetime | None]:
    """A new limited run's ``(rate_at, begin_at)``: the instant its start counts in its rate
    window (None without a rate limit: ``now`` when refusing, the first instant the window
    allows when throttling), and the instant it begins when that is later than now (else None).

    A debounced run begins after its period; a throttled one also no sooner than its window.
    """
    wanted = wanted_begin(spec, now)
    rate_at = None
    if spec.rate is not None:
        opens = window_opens(spec.rate, last) if spec.rate.delay else None
        rate_at = now if not spec.rate.delay else max(wanted, opens or wanted)
    begin = max(wanted, rate_at or wanted)
    return rate_at, begin if begin > now else None


def refolded_begin(gate: DebounceGate, run: Run, now: datetime) -> datetime:
    """A held debounced run's new beginning when a start folds into it: after the debounce
    period, and still no sooner than its rate window allowed it (its ``rate_at``)."""
    begin = debounce_begin(gate, now, run.created_at)
    return begin if run.rate_at is None else max(begin, run.rate_at)


def claimed_at_start(gate: SingletonGate | None, waiting: bool) -> bool:
    """Whether a new run may be claimed in the write that creates it: nothing to wait for (a
    replacing start waits for the runs it cancels to settle)."""
    return not waiting and not (gate is not None and gate.replace)


def free_slots(limit: int, holders: int) -> int:
    return max(0, limit - holders)


def admits(limit: int, holders: int, rank: int) -> bool:
    """Whether the waiter at FIFO ``rank`` (0 = oldest) gets one of the free slots."""
    return rank < free_slots(limit, holders)
