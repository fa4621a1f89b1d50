"""What a failover lost: each old primary's data, as the crash left it, against the store's.

A failover stops the primary as in a crash and promotes its standby. Whatever the old primary
had committed that the standby had not received is gone: with synchronous replication only
commits still in flight at the crash (their callers got an error, as in any crash), with
asynchronous replication acknowledged ones too. The injector starts each crashed server on a
port of its own and reads it (:func:`read_state`); :func:`losses` compares that with the store
at the end of the run and sorts what is missing by what it does:

- a **run** the old primary had and the store has not: a start gone (acknowledged, if the
  producer's record says so: the checker's "lost" counts those);
- a **step record** the old primary had that the store has not, or holds with another result:
  the checkpoint was lost and the step ran again (or is to run);
- a **settlement** the old primary had that is not the run's settlement in the store: the run
  was resumed from its last checkpoint, its last step run again.

A step record lost is *acknowledged* when its run went on before the crash: a later step of the
run began after the lost record's execution ended, which a turn does only once the write
carrying that record has committed. Steps in a step queue (their siblings run side by side) and
a remote workflow's (checkpointed together at the end of their turn) prove nothing so.
Synchronous replication must lose none of those.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from .check import Execution

_TERMINAL = ("completed", "failed", "cancelled", "dead")


@dataclass(frozen=True)
class StoreState:
    """A database's runs (status, settlement instant) and its step records (kind, status,
    output); ``crashed_at`` is the wall-clock time of the crash for an old primary's."""

    runs: dict[str, tuple[str, str | None]]
    records: dict[tuple[str, int], tuple[str, str, Any]]
    crashed_at: float | None = None


@dataclass
class Losses:
    """What the failovers lost, each entry naming the run (and step)."""

    runs: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)  # a step's, its result lost
    acknowledged: list[str] = field(default_factory=list)  # records whose run went on first
    settlements: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # sleeps, waits, replies, children

    @property
    def total(self) -> int:
        return len(self.runs) + len(self.records) + len(self.settlements) + len(self.other)


def read_state(url: str, crashed_at: float | None = None) -> StoreState:
    with psycopg.connect(url, autocommit=True) as conn:
        runs = conn.execute("SELECT id, status, settled_at::text FROM runlane_runs").fetchall()
        records = conn.execute(
            "SELECT run_id, seq, kind, status, output FROM runlane_steps"
        ).fetchall()
    return StoreState(
        runs={run_id: (status, settled) for run_id, status, settled in runs},
        records={(r, seq): (kind, status, output) for r, seq, kind, status, output in records},
        crashed_at=crashed_at,
    )


def losses(
    crashes: list[StoreState],
    final: StoreState,
    executions: list[Execution],
    batched: Collection[str] = (),
) -> Losses:
    """What ``crashes`` (each old primary's state) had that ``final`` has not. ``batched``:
    runs whose steps a turn checkpoints together at its end (remote workflows' local steps),
    which going on past a step therefore does not acknowledge."""
    found = Losses()
    went_on = _went_on([e for e in executions if e.run not in batched])
    for crash in crashes:
        _lost_runs(crash, final, found)
        for (run_id, seq), (kind, _, output) in sorted(_lost_records(crash, final).items()):
            if kind != "step":
                found.other.append(f"{run_id} #{seq} {kind}")
                continue
            found.records.append(f"{run_id} #{seq}")
            if crash.crashed_at is not None and went_on(run_id, output, crash.crashed_at):
                found.acknowledged.append(f"{run_id} #{seq}")
    return found


def _lost_runs(crash: StoreState, final: StoreState, found: Losses) -> None:
    """The runs, and the settlements, ``crash`` had that ``final`` has not."""
    for run_id, (status, settled) in sorted(crash.runs.items()):
        now = final.runs.get(run_id)
        if now is None:
            found.runs.append(run_id)
        elif status in _TERMINAL and now[1] != settled:
            found.settlements.append(f"{run_id} ({status} at {settled}, now {now[0]})")


def _lost_records(crash: StoreState, final: StoreState) -> dict[tuple[str, int], Any]:
    """The completed records of ``crash`` that ``final`` lacks or holds with another outcome
    (a run lost whole is counted as a run, not by its records)."""
    return {
        key: (kind, status, output)
        for key, (kind, status, output) in crash.records.items()
        if status == "completed"
        and key[0] in final.runs
        and (final.records.get(key) or ("", "", None))[1:] != (status, output)
    }


def _went_on(executions: list[Execution]) -> Callable[[str, Any, float], bool]:
    """Whether a run went on, before ``crashed_at``, past the execution that returned ``token``:
    another of its steps, outside a step queue, began after that one ended."""
    by_run: defaultdict[str, list[Execution]] = defaultdict(list)
    for e in executions:
        by_run[e.run].append(e)

    def went_on(run_id: str, token: Any, crashed_at: float) -> bool:
        ran = [e for e in by_run[run_id] if e.token == token]
        if not ran:
            return False
        label, ended = ran[0].label, min(e.end for e in ran)
        return any(
            ended <= e.start < crashed_at and e.label != label and not e.lane.startswith("q:")
            for e in by_run[run_id]
        )

    return went_on


__all__ = ["Losses", "StoreState", "losses", "read_state"]
