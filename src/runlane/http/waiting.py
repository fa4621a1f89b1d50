"""What an active run waits for, as its page says it: a sleep until an instant, a signal, an
event, a child, a retry, a worker's result, a slot on a lane (and its place in line), a step
queue, its throttle or debounce, a remote workflow's turn, a resume, or an engine to take it.

Worked out from what the store holds (the run, its step records, the lanes when it is
blocked, the engines' records: what each live engine serves) and what this server's engine
knows (its registry); nothing is guessed: a run whose records say nothing more is "an
engine's next turn", and one whose version no live engine serves says so.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from ..lanes import AllLanes
from ..models import Run, RunStatus, StepKind, StepRecord, StepStatus
from ..registry import Registry
from .shapes import jsonable

Waiting = dict[str, Any]


def waiting_for(
    run: Run,
    steps: Sequence[StepRecord],
    lanes: AllLanes | None,
    registry: Registry,
    now: datetime,
    served: Collection[tuple[str, str]],
) -> Waiting | None:
    """What ``run`` waits for (None once it is settled); ``lanes`` is needed for a blocked run
    only (its place in line), and may be None otherwise; ``served`` is what the live engines
    serve, ``(workflow, version)`` pairs."""
    if run.is_terminal:
        return None
    if run.status == RunStatus.PAUSED:
        return {"kind": "resume", "reason": "an operator's resume: it is paused"}
    if run.status == RunStatus.BLOCKED:
        return _blocked(run, lanes, now)
    if run.status in (RunStatus.RUNNING, RunStatus.CANCELLING):
        return {"kind": "turn", "reason": f"a turn in progress on engine {_engine(run)}"}
    if run.awaiting_decision_task_id is not None:
        return _remote_turn(run, registry)
    waits = [w for w in (_step_wait(r, registry) for r in steps) if w is not None]
    if waits:
        return waits[0] if len(waits) == 1 else {"kind": "all", "reason": _all(waits), "of": waits}
    return _next_turn(run, served)


def _engine(run: Run) -> str:
    return (run.lease_owner or "?").split(":", 1)[0]


def _blocked(run: Run, lanes: AllLanes | None, now: datetime) -> Waiting:
    if run.held(now) and run.begin_at is not None:
        if run.debounce_key is not None:
            return _at("debounce", run.begin_at, "its debounce: it begins at {at}")
        return _at("throttle", run.begin_at, "its rate limit's window: it begins at {at}")
    queued = _queue_of(run, lanes)
    if queued is not None:
        return queued
    if run.singleton_key is not None and not run.holds_slot:
        return _slot(run, lanes)
    return {"kind": "admission", "reason": "admission (its next claim)"}


def _slot(run: Run, lanes: AllLanes | None) -> Waiting:
    lane = next((x for x in (lanes.lanes if lanes else []) if x.name == run.singleton_key), None)
    if lane is None:
        return {"kind": "slot", "reason": "a slot on its singleton lane"}
    ids = [r.run_id for r in lane.waiters]
    line, place = _in_line(ids.index(run.id) + 1 if run.id in ids else None, len(ids))
    return {
        "kind": "slot",
        "lane": lane.key,
        "tag": lane.tag,
        "holders": [r.run_id for r in lane.holders],
        "reason": f"a slot on lane {lane.key} ({lane.usage} of {lane.limit} held){place}",
        **line,
    }


def _in_line(position: int | None, waiting: int) -> tuple[Waiting, str]:
    """A place in line, as fields and as the words that end a reason."""
    place = f", number {position} of {waiting} in line" if position else ""
    return {"position": position, "waiting": waiting}, place


def _queue_of(run: Run, lanes: AllLanes | None) -> Waiting | None:
    for queue in lanes.queues if lanes else []:
        waiters = list(queue.waiters)
        for position, entry in enumerate(waiters, 1):
            if entry.run_id == run.id:
                line, place = _in_line(position, len(waiters))
                what = f"a slot of step queue {queue.name} for step #{entry.seq}"
                return {"kind": "queue", "queue": queue.name, "seq": entry.seq,
                        "reason": what + place, **line}  # fmt: skip
    return None


def _step_wait(record: StepRecord, registry: Registry) -> Waiting | None:
    if record.status == StepStatus.RUNNING:
        group = _group(record.name, registry)
        where = f"a worker of group {group}" if group else "a remote worker"
        return {
            "kind": "worker",
            "seq": record.seq,
            "step": record.name,
            "group": group,
            "reason": f"{where}: step #{record.seq} {record.name}, attempt {record.attempts}",
        }
    if record.status != StepStatus.PENDING:
        return None
    return _pending(record)


def _pending(record: StepRecord) -> Waiting:
    kind, name, wake = record.kind, record.name, record.wake_at
    if kind == StepKind.SLEEP and wake is not None:
        return _at("sleep", wake, "a sleep: it wakes at {at}", seq=record.seq)
    if kind == StepKind.SIGNAL:
        return _named("signal", record, f"signal {name}")
    if kind == StepKind.UPDATE:
        return _named("update", record, f"update {name}")
    if kind == StepKind.EVENT:
        return _named("event", record, f"event {name}")
    if kind in (StepKind.CHILD, StepKind.START_CHILD):
        child = (record.input or {}).get("child_id") if isinstance(record.input, dict) else None
        return {"kind": "child", "seq": record.seq, "child": child, "reason": f"child {child}"}
    if wake is not None and record.error is not None:
        text = f"a retry of step #{record.seq} {name} at {{at}} (attempt {record.attempts + 1})"
        return _at("retry", wake, text, seq=record.seq, step=name)
    return {"kind": "step", "seq": record.seq, "step": name, "reason": f"step {name}"}


def _named(kind: str, record: StepRecord, what: str) -> Waiting:
    wait: Waiting = {"kind": kind, "seq": record.seq, "name": record.name, "reason": what}
    if record.wake_at is not None:
        wait["timeout_at"] = jsonable(record.wake_at)
        wait["reason"] += f" (times out at {jsonable(record.wake_at)})"
    return wait


def _at(kind: str, at: datetime, text: str, **extra: Any) -> Waiting:
    shown = jsonable(at)
    return {"kind": kind, "until": shown, "reason": text.format(at=shown), **extra}


def _group(step: str, registry: Registry) -> str | None:
    try:
        return registry.step(step).group
    except Exception:  # a step this engine does not register: its group is not known here
        return None


def _remote_turn(run: Run, registry: Registry) -> Waiting:
    group = _workflow_group(run, registry)
    where = f"a worker of group {group}" if group else "a remote worker"
    return {"kind": "remote_turn", "group": group, "reason": f"{where} to decide its next turn"}


def _workflow_group(run: Run, registry: Registry) -> str | None:
    try:
        return registry.workflow(run.workflow, run.version).group
    except Exception:  # not registered here
        return None


def _next_turn(run: Run, served: Collection[tuple[str, str]]) -> Waiting:
    """A pending run (or a suspended one due now): an engine's next turn; when no live engine
    serves the run's workflow version, it waits for one that does."""
    wait: Waiting = {"kind": "engine", "reason": "an engine to take its next turn"}
    if run.wake_at is not None:
        wait["until"] = jsonable(run.wake_at)
    wait["served"] = (run.workflow, run.version) in served
    if not wait["served"]:
        wait["reason"] += (
            f"; no live engine serves {run.workflow}@{run.version}:"
            " it waits for an engine with that version"
        )
    return wait


def _all(waits: list[Waiting]) -> str:
    return "all of: " + "; ".join(str(w["reason"]) for w in waits)


__all__ = ["waiting_for"]
