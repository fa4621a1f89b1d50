"""Queue names, shared by every transport and by workers written in other languages.

Each transport puts its own prefix before these (``runlane:`` by default), so two deployments,
or two tests, can share one Redis or one database without seeing each other's messages.
"""

from __future__ import annotations

RUNS = "runs"
RESULTS = "results"
HEARTBEATS = "heartbeats"


def run_queue(namespace: str | None) -> str:
    """``runs`` for runs without a namespace, ``runs:<namespace>`` otherwise."""
    return RUNS if namespace is None else f"{RUNS}:{namespace}"


def task_queue(group: str) -> str:
    return f"tasks:{group}"


def qualified(prefix: str, name: str) -> str:
    return f"{prefix}:{name}" if prefix else name


__all__ = ["HEARTBEATS", "RESULTS", "RUNS", "qualified", "run_queue", "task_queue"]
