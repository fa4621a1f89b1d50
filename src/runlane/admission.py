"""Singleton gate and concurrency quota policy: pure decisions over counts a store read.

Stores call these inside the one atomic operation that reads the counts and writes the result,
so the policy is written once and every backend applies it the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .definitions import Concurrency, WorkflowDefinition
from .errors import ConcurrencyLimitError, RunlaneError, SingletonQueueFullError
from .models import JSON, QuotaGate, Run, SingletonGate, Started


def singleton_gate(definition: WorkflowDefinition, input: JSON) -> SingletonGate | None:
    """The workflow's singleton rule evaluated on a start's input."""
    rule = definition.singleton
    if rule is None:
        return None
    key = rule.key(input)
    if not isinstance(key, str) or not key:
        raise RunlaneError(
            f"singleton key of {definition.name!r} must be a non-empty string, got {key!r}"
        )
    return SingletonGate(
        lane(rule.scope, definition.name, key),
        rule.limit,
        rule.queue_depth,
        replace=rule.on_busy == "replace",
        user_key=key,
    )


def lane(scope: str, workflow: str, key: str) -> str:
    """The singleton lane a key names: ``<length of workflow>:<workflow>:<key>`` for a lane of
    one workflow, ``*:<key>`` for a global lane. The length makes the text unambiguous whatever
    the names hold, and a global lane never collides with a workflow's."""
    return f"*:{key}" if scope == "global" else f"{len(workflow)}:{workflow}:{key}"


def lane_parts(lane: str) -> tuple[str | None, str]:
    """A lane's workflow (None for a global lane) and key."""
    head, _, rest = lane.partition(":")
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
        tags.append(f"concurrency:{run.concurrency_key}")
    return tuple(tags)


def lane_tags(singleton: SingletonGate | None, quota: QuotaGate | None) -> tuple[str, ...]:
    """The tags of a gated run: ``singleton:<key>`` and ``concurrency:<key>``."""
    tags = []
    if singleton is not None:
        tags.append(f"singleton:{singleton.shown_key}")
    if quota is not None:
        tags.append(f"concurrency:{quota.key}")
    return tuple(tags)


async def quota_gate(rule: Concurrency | None, input: JSON) -> QuotaGate | None:
    """A quota rule evaluated on a start's input; None for no rule or a ``None`` key."""
    if rule is None:
        return None
    key = rule.key(input) if callable(rule.key) else rule.key
    if key is None:
        return None
    if not isinstance(key, str):
        raise RunlaneError(f"concurrency key must be a string or None, got {key!r}")
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
    backlog is the workflow's rule for the run's own lane.
    """
    quota = run.quota
    if quota is None and run.concurrency_key is not None:
        rule = await quota_gate(definition.concurrency, run.input)
        quota = rule if rule is not None and rule.key == run.concurrency_key else None
    singleton = singleton_gate(definition, run.input)
    if singleton is None or singleton.key != run.singleton_key:
        singleton = None
    return quota, singleton


def refusal_record(refusal: Exception, window: datetime | None) -> dict[str, Any]:
    """A refused schedule window, as its ``last_error``: the refusal's type, message, fields."""
    record: dict[str, Any] = {"type": type(refusal).__name__, "message": str(refusal)}
    for name in ("workflow", "key", "limit", "active", "max_queue_depth"):
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
        return ConcurrencyLimitError(workflow, gate.key, gate.limit, active)
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


def waits_at_start(gate: SingletonGate | None, ahead: int) -> bool:
    """Whether a new run of ``gate``'s key, with ``ahead`` runs in front of it (holders and
    waiters that are not cancelling), would be refused a slot at once."""
    return gate is not None and not gate.replace and ahead >= gate.limit


def claimed_at_start(gate: SingletonGate | None, waiting: bool) -> bool:
    """Whether a new run may be claimed in the write that creates it: nothing to wait for (a
    replacing start waits for the runs it cancels to settle)."""
    return not waiting and not (gate is not None and gate.replace)


def free_slots(limit: int, holders: int) -> int:
    return max(0, limit - holders)


def admits(limit: int, holders: int, rank: int) -> bool:
    """Whether the waiter at FIFO ``rank`` (0 = oldest) gets one of the free slots."""
    return rank < free_slots(limit, holders)
