"""Wire messages through a codec: the payload fields of tasks, results and decisions.

Which fields of a message are payloads (docs/wire.md, "Encoded payloads"), each encoded as
:mod:`runlane.payloads` encodes a stored one:

* a step task's ``input``; a step result's ``output`` and ``error``;
* a workflow task's ``input``, its ``history`` records (as stored records: ``output`` and
  ``error``, and ``input`` for kind ``step``), its ``signals``' ``payload`` and its
  ``children``' ``output`` and ``error``;
* a decision's ``checkpoints`` (records), its commands' ``input`` and its outcome's
  ``output``, ``error`` and ``input``.

Run messages and heartbeats carry no payload. An engine with a codec sends and takes through
:class:`EncodedTransport`; a worker opens each task itself (one that does not decode is
answered with a failure of its step or turn) and seals what it sends (:class:`WireCodec`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import PayloadCodecError, error_dict
from ..models import JSON, StepKind
from ..payloads import Payloads, subject_of_run
from .base import HeartbeatFeed, Message, Transport

WORKFLOW_TASK = "workflow"
DECISION = "decision"

Value = Callable[[JSON, str], JSON]
Error = Callable[[Any, str], Any]


class WireCodec:
    """Seal the payloads of a message going out, open those of one coming in (strictly: a
    payload that does not decode raises ``PayloadCodecError`` naming its run)."""

    def __init__(self, payloads: Payloads) -> None:
        self.payloads = payloads

    def seal_task(self, task: Message) -> Message:
        return task if self.payloads.codec is None else _task(task, *self._sealing())

    def open_task(self, task: Message) -> Message:
        if self.payloads.codec is None:
            return self._input_in_clear(task)
        return _task(task, *self._opening(task))

    def seal_result(self, result: Message) -> Message:
        """A step result, or a decision (``"kind": "decision"``)."""
        return result if self.payloads.codec is None else _result(result, *self._sealing())

    def open_result(self, result: Message) -> Message:
        if self.payloads.codec is None:
            return result
        return _result(result, *self._opening(result))

    def _input_in_clear(self, task: Message) -> Message:
        """Without a codec only the task's input is looked at (a history is not walked for a
        check): an encoded one raises, naming the run."""
        if isinstance(task, dict):
            subject = subject_of_run(str(task.get("run_id")))
            self.payloads.open(task.get("input"), subject, "input")
        return task

    def readable_result(self, result: Message) -> Message:
        """``result`` opened; one that does not decode becomes the failure it stands for: a
        step's attempt failed with ``PayloadCodecError`` (fatal, never retried), or a
        decision failing its run with it."""
        try:
            return self.open_result(result)
        except PayloadCodecError as refused:
            failure = error_dict(refused, with_traceback=False)
            if result.get("kind") == DECISION:
                return {
                    **result,
                    "checkpoints": [],
                    "consumed_signals": [],
                    "commands": [],
                    "outcome": {"type": "fail", "error": failure},
                }
            return {**result, "ok": False, "output": None, "error": failure}

    def _sealing(self) -> tuple[Value, Error]:
        payloads = self.payloads
        return (lambda value, what: payloads.seal(value)), (lambda e, what: payloads.seal_error(e))

    def _opening(self, message: Message) -> tuple[Value, Error]:
        payloads, subject = self.payloads, subject_of_run(str(message.get("run_id")))
        return (
            lambda value, what: payloads.open(value, subject, what),
            lambda error, what: payloads.open_error(error, subject, what),
        )


def _task(task: Message, value: Value, error: Error) -> Message:
    if not isinstance(task, dict):
        return task  # the consumer's check drops it
    if task.get("kind") != WORKFLOW_TASK:
        return _fields(task, value, error, ("input",), (), f"input of step #{task.get('seq')}")
    changed = _fields(task, value, error, ("input",), (), "input")
    changed.update(_each(task, "history", lambda doc: _record(doc, value, error)))
    changed.update(_each(task, "signals", lambda doc: _signal(doc, value)))
    children = task.get("children")
    if isinstance(children, dict):
        changed["children"] = {
            child: _fields(doc, value, error, ("output",), ("error",), f"outcome of child {child}")
            for child, doc in children.items()
        }
    return changed


def _result(result: Message, value: Value, error: Error) -> Message:
    if not isinstance(result, dict):
        return result
    if result.get("kind") != DECISION:
        what = f"result of step #{result.get('seq')}"
        return _fields(result, value, error, ("output",), ("error",), what)
    changed = dict(result)
    changed.update(_each(result, "checkpoints", lambda doc: _record(doc, value, error)))
    changed.update(_each(result, "commands", lambda doc: _command(doc, value)))
    outcome = result.get("outcome")
    if isinstance(outcome, dict):
        what = "outcome of the decision"
        changed["outcome"] = _fields(outcome, value, error, ("output", "input"), ("error",), what)
    return changed


def _record(doc: Any, value: Value, error: Error) -> Any:
    if not isinstance(doc, dict):
        return doc
    what = f"#{doc.get('seq')} ({doc.get('kind')} {doc.get('name')!r})"
    payloads = ("input", "output") if doc.get("kind") == StepKind.STEP else ("output",)
    return _fields(doc, value, error, payloads, ("error",), what)


def _signal(doc: Any, value: Value) -> Any:
    if not isinstance(doc, dict):
        return doc
    return _fields(doc, value, None, ("payload",), (), f"payload of signal {doc.get('name')!r}")


def _command(doc: Any, value: Value) -> Any:
    if not isinstance(doc, dict) or "input" not in doc:
        return doc
    return _fields(doc, value, None, ("input",), (), f"input of command #{doc.get('seq')}")


def _fields(
    doc: Message,
    value: Value,
    error: Error | None,
    payloads: Sequence[str],
    errors: Sequence[str],
    what: str,
) -> Message:
    changed = dict(doc)
    for name in payloads:
        if name in doc:
            changed[name] = value(doc[name], f"{name} ({what})")
    for name in errors:
        if name in doc and error is not None:
            changed[name] = error(doc[name], f"{name} ({what})")
    return changed


def _each(message: Message, name: str, change: Callable[[Any], Any]) -> Message:
    items = message.get(name)
    return {name: [change(item) for item in items]} if isinstance(items, list) else {}


class EncodedTransport:
    """``inner`` with the payloads of every task, result and decision sealed as they are sent
    and opened as they are taken (an engine's side: a result or decision that does not decode
    is taken as the failure it stands for, see :meth:`WireCodec.readable_result`)."""

    def __init__(self, inner: Transport, payloads: Payloads) -> None:
        self.inner = inner
        self.wire = WireCodec(payloads)
        self.has_run_queue = inner.has_run_queue

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def enqueue_runs(self, messages: Sequence[Message]) -> None:
        await self.inner.enqueue_runs(messages)

    async def take_runs(
        self,
        namespaces: Sequence[str | None] | None,
        codes: Sequence[str],
        max_items: int,
        timeout: float,
    ) -> list[Message]:
        return await self.inner.take_runs(namespaces, codes, max_items, timeout)

    async def send_tasks(self, group: str, tasks: Sequence[Message]) -> None:
        await self.inner.send_tasks(group, [self.wire.seal_task(task) for task in tasks])

    async def take_tasks(self, group: str, max_items: int, timeout: float) -> list[Message]:
        return await self.inner.take_tasks(group, max_items, timeout)

    async def send_result(self, result: Message) -> None:
        await self.inner.send_result(self.wire.seal_result(result))

    async def take_results(self, max_items: int, timeout: float) -> list[Message]:
        taken = await self.inner.take_results(max_items, timeout)
        return [self.wire.readable_result(result) for result in taken]

    async def send_decision(self, queue: str, decision: Message) -> None:
        await self.inner.send_decision(queue, self.wire.seal_result(decision))

    async def take_decisions(
        self, queues: Sequence[str], max_items: int, timeout: float
    ) -> list[Message]:
        taken = await self.inner.take_decisions(queues, max_items, timeout)
        return [self.wire.readable_result(decision) for decision in taken]

    async def publish_heartbeat(self, beat: Message) -> None:
        await self.inner.publish_heartbeat(beat)

    def heartbeats(self) -> HeartbeatFeed:
        return self.inner.heartbeats()


def encoded_transport(transport: Transport | None, payloads: Payloads) -> Transport | None:
    """``transport`` as an engine with ``payloads``' codec sends and takes through it."""
    if transport is None or payloads.codec is None:
        return transport
    return EncodedTransport(transport, payloads)


__all__ = ["EncodedTransport", "WireCodec", "encoded_transport"]
