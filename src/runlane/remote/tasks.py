"""The workflow task and the decision (docs/wire.md): a remote workflow turn on the wire.

The engine sends a *workflow task* (the run, its history, its pending signals, the outcomes of
the children it waits for); a worker replays the body against it and answers a *decision*:
the records its turn wrote (local steps it ran, sleeps, signal waits, recorded values), the
commands only the engine can carry out (remote step dispatches, child starts and cancels) and
the outcome (suspend until a time, complete, fail, continue as new).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..attributes import check_attributes
from ..errors import SerializationError
from ..models import JSON, Run, Signal, StepKind, StepRecord, StepStatus
from ..transports.addresses import code, decision_queue
from ..transports.base import Message
from ..transports.messages import PROTOCOL, Malformed

WORKFLOW_KIND = "workflow"
DECISION_KIND = "decision"

RECORD_KINDS = frozenset(
    {
        StepKind.STEP,
        StepKind.SLEEP,
        StepKind.SIGNAL,
        StepKind.NOW,
        StepKind.SIDE_EFFECT,
        StepKind.PATCH,
        StepKind.UPDATE,
        StepKind.REPLY,
        StepKind.ATTRIBUTES,
    }
)
"""The records a decision may write itself (children and remote steps are commands; a
waited child's record only once the task said how the child ended)."""

OUTCOMES = frozenset({"suspend", "complete", "fail", "continue_as_new"})


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _from_ts(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value)
    raise Malformed(f"a time must be an ISO 8601 string or null, got {value!r}")


def record_doc(record: StepRecord) -> Message:
    return {
        "seq": record.seq,
        "kind": str(record.kind),
        "name": record.name,
        "status": str(record.status),
        "input": record.input,
        "output": record.output,
        "error": record.error,
        "attempts": record.attempts,
        "started_at": _ts(record.started_at),
        "finished_at": _ts(record.finished_at),
        "wake_at": _ts(record.wake_at),
    }


def record_from_doc(run_id: str, doc: Any) -> StepRecord:
    if not isinstance(doc, dict):
        raise Malformed(f"a history record must be an object, got {doc!r}")
    seq, kind, status = doc.get("seq"), doc.get("kind"), doc.get("status")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise Malformed(f"a history record's seq must be a positive integer, got {seq!r}")
    if (
        not isinstance(kind, str)
        or kind not in set(StepKind)
        or not isinstance(status, str)
        or (status not in set(StepStatus))
    ):
        raise Malformed(f"history record #{seq} has kind {kind!r}, status {status!r}")
    if not isinstance(doc.get("name"), str):
        raise Malformed(f"history record #{seq} needs a name")
    attempts = doc.get("attempts")
    if attempts is not None and (
        not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0
    ):
        raise Malformed(f"history record #{seq}'s attempts must be a count, got {attempts!r}")
    error = doc.get("error")
    return StepRecord(
        run_id=run_id,
        seq=seq,
        name=doc["name"],
        kind=StepKind(kind),
        status=StepStatus(status),
        input=doc.get("input"),
        output=doc.get("output"),
        error=error if isinstance(error, dict) else None,
        attempts=attempts or 0,
        started_at=_from_ts(doc.get("started_at")),
        finished_at=_from_ts(doc.get("finished_at")),
        wake_at=_from_ts(doc.get("wake_at")),
    )


def workflow_task(
    task_id: str,
    run: Run,
    group: str,
    history: Iterable[StepRecord],
    signals: Iterable[Signal],
    children: Mapping[str, Run],
    now: datetime,
    expires_at: datetime,
    trace: Mapping[str, str] | None = None,
) -> Message:
    return {
        "protocol": PROTOCOL,
        "kind": WORKFLOW_KIND,
        "task_id": task_id,
        "run_id": run.id,
        "workflow": run.workflow,
        "version": run.version,
        "group": group,
        "input": run.input,
        "attempt": run.recoveries + 1,
        "fence": run.fence,
        "priority": run.priority,
        "history": [record_doc(r) for r in sorted(history, key=lambda r: r.seq)],
        "signals": [{"id": s.id, "name": s.name, "payload": s.payload} for s in signals],
        "children": {
            child_id: {"status": str(child.status), "output": child.output, "error": child.error}
            for child_id, child in children.items()
        },
        "trace": dict(trace) if trace else None,
        "dispatched_at": now.isoformat(),
        "expires_at": expires_at.isoformat(),
        "reply_to": decision_queue(code(run.workflow, run.version)),
    }


def reply_to(task: Message) -> str | None:
    """Where a task's decision goes: its ``reply_to`` queue (the engines that serve the run's
    code take it), or None for the results queue (a task from an engine before ``reply_to``)."""
    queue = task.get("reply_to")
    return queue if isinstance(queue, str) and queue else None


def expired(task: Message, now: datetime) -> bool:
    """A task nobody took before ``expires_at`` has been (or is being) sent again under a fresh
    task id: its decision would be dropped, so it is not worth replaying."""
    expires = _from_ts(task.get("expires_at"))
    return expires is not None and expires < now


def silence_window(task: Message) -> float | None:
    """Seconds of silence after which the engine sends the task's turn again (``expires_at``
    less ``dispatched_at``), or None when the task does not say."""
    sent, expires = _from_ts(task.get("dispatched_at")), _from_ts(task.get("expires_at"))
    if sent is None or expires is None or expires <= sent:
        return None
    return (expires - sent).total_seconds()


def awaited_children(history: Iterable[StepRecord]) -> list[str]:
    """The child runs whose outcome the next replay needs: pending child records."""
    return [
        str(r.input["child_id"])
        for r in history
        if r.kind == StepKind.CHILD
        and r.status == StepStatus.PENDING
        and isinstance(r.input, dict)
        and "child_id" in r.input
    ]


@dataclass
class Decision:
    """A worker's answer to one workflow task, as the engine applies it."""

    task_id: str
    run_id: str
    records: list[StepRecord] = field(default_factory=list)
    consumed_signals: list[int] = field(default_factory=list)
    steps: list[Message] = field(default_factory=list)
    children: list[Message] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    outcome: Message = field(default_factory=lambda: {"type": "suspend", "wake_at": None})

    def wake_at(self) -> datetime | None:
        return _from_ts(self.outcome.get("wake_at"))


def decision_doc(decision: Decision, worker: str) -> Message:
    commands: list[Message] = [
        *({"type": "step", **s} for s in decision.steps),
        *({"type": "child", **c} for c in decision.children),
        *({"type": "cancel_child", "child_id": c} for c in decision.cancels),
    ]
    return {
        "protocol": PROTOCOL,
        "kind": DECISION_KIND,
        "task_id": decision.task_id,
        "run_id": decision.run_id,
        "worker": worker,
        "checkpoints": [record_doc(r) for r in decision.records],
        "consumed_signals": list(decision.consumed_signals),
        "commands": commands,
        "outcome": decision.outcome,
    }


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_workflow_task(message: Any) -> Message:
    """``message`` as a valid workflow task, or ``Malformed`` with the reason."""
    _check_common(message, "workflow task")
    for name in ("workflow", "version"):
        if not _text(message.get(name)):
            raise Malformed(f"workflow task field {name!r} must be a non-empty string")
    if not _seq(message.get("attempt")):
        raise Malformed("workflow task field 'attempt' must be a positive integer")
    fence = message.get("fence")
    if fence is not None and (not isinstance(fence, int) or isinstance(fence, bool) or fence < 0):
        raise Malformed(f"workflow task field 'fence' must be a non-negative integer: {fence!r}")
    for name, kind in (("history", list), ("signals", list), ("children", dict)):
        if not isinstance(message.get(name, kind()), kind):
            raise Malformed(f"workflow task field {name!r} must be a JSON {kind.__name__}")
    # Every record, signal and child outcome too: a task refused here is dropped (the engine
    # sends the turn again after its silence), never answered with a failure of its run.
    run_id = str(message["run_id"])
    for doc in message.get("history") or []:
        record_from_doc(run_id, doc)
    for doc in message.get("signals") or []:
        signal_from_doc(run_id, doc)
    for doc in (message.get("children") or {}).values():
        child_outcome(doc)
    checked: Message = message
    return checked


def parse_decision(message: Any) -> Decision:
    """A decision message as a :class:`Decision`, or ``Malformed`` with the reason."""
    _check_common(message, "decision")
    run_id = str(message["run_id"])
    outcome = message.get("outcome")
    kind = outcome.get("type") if isinstance(outcome, dict) else None
    if not isinstance(kind, str) or kind not in OUTCOMES:
        raise Malformed(f"decision outcome must be one of {sorted(OUTCOMES)}, got {outcome!r}")
    if kind == "suspend":
        _from_ts(outcome.get("wake_at"))  # checked now, not once the decision is being applied
    records = [record_from_doc(run_id, doc) for doc in _list(message, "checkpoints")]
    for record in records:
        if record.kind == StepKind.CHILD and record.done:
            continue  # a child's outcome, read from the task's ``children``
        if record.kind not in RECORD_KINDS:
            raise Malformed(f"a decision cannot write a {record.kind} record (#{record.seq})")
        if record.kind == StepKind.ATTRIBUTES:
            _check_attributes_record(record)
    decision = Decision(str(message["task_id"]), run_id, records, outcome=dict(outcome))
    consumed = _list(message, "consumed_signals")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in consumed):
        raise Malformed(f"decision field 'consumed_signals' must list signal ids: {consumed!r}")
    decision.consumed_signals = list(consumed)
    for command in _list(message, "commands"):
        _add_command(decision, command)
    return decision


def _check_attributes_record(record: StepRecord) -> None:
    """An ``attributes`` record of a decision: completed, its output the attributes it sets."""
    if record.status != StepStatus.COMPLETED:
        raise Malformed(f"attributes record #{record.seq} must be completed")
    try:
        check_attributes(record.output, f"attributes record #{record.seq}")
    except SerializationError as exc:
        raise Malformed(str(exc)) from None


def _add_command(decision: Decision, command: Any) -> None:
    kind = command.get("type") if isinstance(command, dict) else None
    if kind == "cancel_child" and _text(command.get("child_id")):
        decision.cancels.append(command["child_id"])
        return
    if kind not in ("step", "child") or not _seq(command.get("seq")):
        raise Malformed(f"a decision command must be a step, child or cancel_child: {command!r}")
    if kind == "step" and _text(command.get("name")) and _text(command.get("group")):
        decision.steps.append(command)
    elif kind == "child" and _text(command.get("workflow")) and _text(command.get("child_id")):
        decision.children.append(command)
    else:
        raise Malformed(f"decision command #{command.get('seq')} lacks a field: {command!r}")


def _check_common(message: Any, what: str) -> None:
    if not isinstance(message, dict):
        raise Malformed(f"a {what} must be a JSON object")
    version = message.get("protocol", PROTOCOL)
    if version != PROTOCOL:
        raise Malformed(f"protocol version {version!r} is not spoken here (this side: {PROTOCOL})")
    for name in ("task_id", "run_id"):
        if not _text(message.get(name)):
            raise Malformed(f"{what} field {name!r} must be a non-empty string")


def _list(message: Message, name: str) -> Sequence[Any]:
    value = message.get(name) or []
    if not isinstance(value, list):
        raise Malformed(f"decision field {name!r} must be a list")
    return value


def signal_from_doc(run_id: str, doc: Any) -> Signal:
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), int):
        raise Malformed(f"a pending signal needs an integer id: {doc!r}")
    return Signal(int(doc["id"]), run_id, str(doc.get("name")), doc.get("payload"), datetime.min)


def child_outcome(doc: Any) -> tuple[str, JSON, dict[str, Any] | None]:
    if not isinstance(doc, dict):
        raise Malformed(f"a child outcome must be an object: {doc!r}")
    error = doc.get("error")
    return str(doc.get("status")), doc.get("output"), error if isinstance(error, dict) else None


__all__ = [
    "DECISION_KIND",
    "WORKFLOW_KIND",
    "Decision",
    "awaited_children",
    "check_workflow_task",
    "decision_doc",
    "parse_decision",
    "reply_to",
    "silence_window",
    "workflow_task",
]
