"""Singleton gate and concurrency quota policy: pure decisions over counts a store read.

Stores call these inside the one atomic operation that reads the counts and writes the result,
so the policy is written once and every backend applies it the same way.
"""

from __future__ import annotations

from .errors import ConcurrencyLimitError, SingletonQueueFullError
from .models import QuotaGate, SingletonGate


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
        return SingletonQueueFullError(workflow, gate.key, gate.max_queue_depth)
    return None


def free_slots(limit: int, holders: int) -> int:
    return max(0, limit - holders)


def admits(limit: int, holders: int, rank: int) -> bool:
    """Whether the waiter at FIFO ``rank`` (0 = oldest) gets one of the free slots."""
    return rank < free_slots(limit, holders)
