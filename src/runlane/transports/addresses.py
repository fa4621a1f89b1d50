"""Queue names, shared by every transport and by workers written in other languages.

Each transport puts its own prefix before these (``runlane:`` by default), so two deployments,
or two tests, can share one Redis or one database without seeing each other's messages.

Runs travel by **code**: a run queue holds the runs of one namespace and one ``(workflow,
version)``, so an engine takes only the runs it can replay, and a remote workflow's decisions
go to a queue of its code, taken only by the engines that declare it.
"""

from __future__ import annotations

RUNS = "runs"
RESULTS = "results"
HEARTBEATS = "heartbeats"


def code(workflow: str, version: str) -> str:
    """A ``(workflow, version)`` as one name: ``<workflow>@<version>`` (a version holds no
    ``@``, so the last one separates them)."""
    return f"{workflow}@{version}"


def run_queue(namespace: str | None, code: str) -> str:
    """``runs::<code>`` for runs without a namespace, ``runs:<len>:<namespace>:<code>``
    otherwise: the namespace's length keeps any two (namespace, code) pairs apart."""
    if namespace is None:
        return f"{RUNS}::{code}"
    return f"{RUNS}:{len(namespace)}:{namespace}:{code}"


def run_topic(code: str) -> str:
    """What the run queues of one code share across namespaces (``runs:*:<code>``): where a
    taker of every namespace looks."""
    return f"{RUNS}:*:{code}"


def decision_queue(code: str) -> str:
    """Where the decisions of a remote workflow's turns go (``decisions:<code>``)."""
    return f"decisions:{code}"


def task_queue(group: str) -> str:
    return f"tasks:{group}"


def qualified(prefix: str, name: str) -> str:
    return f"{prefix}:{name}" if prefix else name


__all__ = [
    "HEARTBEATS",
    "RESULTS",
    "RUNS",
    "code",
    "decision_queue",
    "qualified",
    "run_queue",
    "run_topic",
    "task_queue",
]
