"""Forks: a new run of a workflow that starts from another run's recorded operations.

A fork's history is the original's records before a sequence number, copied under the fork's
id and written with the fork's run in one atomic unit (``RunSpec.history``). Its replay finds
those operations done and reuses their results, as any replay does, so none of them executes
again; execution goes on from that sequence number. The original is left as it is.

Only what is settled is copied: a record that is completed or failed (a step's result or its
error, a sleep that ended, a signal, event or update taken, a child's outcome, a patch marker,
a reply). A record still in flight (a step running on a worker, a wait not over) is not, and
its operation runs again in the fork. Signals the original was sent and had not taken yet stay
with the original.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .models import StepRecord, StepStatus


def fork_point(steps: Sequence[StepRecord], from_seq: int | None) -> int:
    """Where a fork of a run with these records goes on: ``from_seq`` (a positive integer), or
    by default its first record that failed or is unfinished, else the one after its last."""
    if from_seq is not None:
        if isinstance(from_seq, bool) or not isinstance(from_seq, int) or from_seq < 1:
            raise ValueError(f"from_seq must be a positive integer, got {from_seq!r}")
        return from_seq
    for record in sorted(steps, key=lambda r: r.seq):
        if record.status != StepStatus.COMPLETED:
            return record.seq
    return max((r.seq for r in steps), default=0) + 1


def forked_records(
    steps: Sequence[StepRecord], fork_id: str, from_seq: int
) -> tuple[StepRecord, ...]:
    """The records a fork starts with: the settled ones before ``from_seq``, as the fork's."""
    return tuple(
        replace(record, run_id=fork_id)
        for record in sorted(steps, key=lambda r: r.seq)
        if record.seq < from_seq and record.done
    )


def fork_id(source_id: str, n: int) -> str:
    """The default id of the ``n``-th fork of a run."""
    return f"{source_id}.fork.{n}"


__all__ = ["fork_id", "fork_point", "forked_records"]
