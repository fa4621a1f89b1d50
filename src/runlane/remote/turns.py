"""Remote workflow turns, the engine's side: send a turn to a worker group, apply its decision.

Each turn is marked, released, then sent: ``await_decision`` records the fresh task id on the
run, suspends it and releases its lease in one write, and only then does the task go to the
group, so a decision that comes back at once, to any instance, finds both. Applying a decision
claims the run under a conditional write that checks it still awaits that very task id (a
duplicate, or the late answer of a turn sent again, finds another id or none, and is dropped)
and then runs the decision's commands through the same :class:`~runlane.turn.Turn` code a
local workflow's turn uses: remote steps through ``Turn.settle_step`` and its driver (so a seq already
dispatched is never dispatched twice), children through ``settle_children``.

A turn with no decision and no beat for its silence window is due again (its ``wake_at`` is
that deadline), and the next claim of the run sends it under a fresh task id. The window is the
workflow's ``turn_timeout`` or the engine's ``remote_advance_silence``, the shorter of the two
(the lease when neither is set). An instance that hears a beat for a turn another instance sent
reads the run once to learn its workflow's window, but only when some workflow it knows has a
window of its own.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from ..context import ChildOp, StepOp
from ..definitions import StepDefinition, WorkflowDefinition
from ..errors import (
    Cancelling,
    LeaseLostError,
    NonDeterminismError,
    Pausing,
    RunCancelling,
    RunPausing,
    UnknownWorkflowError,
    error_dict,
)
from ..faults import OutageLog, is_infrastructure
from ..models import Claim, RunStatus, Settlement, StepKind
from ..registry import Registry
from ..retry import NO_RETRY, Retry
from ..transports.base import Message, Transport
from ..transports.messages import Malformed
from ..turn import Turn, TurnHost, TurnOutcome
from .replay import WorkerHost, failed_decision, replay
from .tasks import (
    Decision,
    awaited_children,
    decision_doc,
    parse_decision,
    workflow_task,
)

log = logging.getLogger(__name__)

PERSISTED_KEEP = 10_000  # task ids whose last persisted beat (and window) is remembered
IN_PROCESS = "in-process"  # the worker a decision made by the engine itself names


class TurnsHost(TurnHost, Protocol):
    """What remote workflow turns need of their instance: a turn's host, and more."""

    @property
    def outage(self) -> OutageLog:
        """Where a workflow beat the store could not take is reported."""
        ...

    @property
    def registry(self) -> Registry:
        """The workflows this instance knows (a turn's window is its workflow's)."""
        ...

    async def apply_decision(self, decision: Decision) -> None:
        """Lease the run for a worker's decision, if it still awaits that turn, and apply it."""
        ...


class RemoteTurns:
    """One engine's side of remote workflow turns."""

    def __init__(self, host: TurnsHost, transport: Transport) -> None:
        self.host = host
        self.transport = transport
        self._persisted: dict[str, float] = {}  # task id -> monotonic time of the last write
        self._windows: dict[str, float] = {}  # task id -> its silence window, once known

    def silence(self, definition: WorkflowDefinition | None = None) -> float:
        """Seconds without a decision or a beat after which a turn of ``definition`` is sent
        again: its ``turn_timeout`` or ``remote_advance_silence``, the shorter; else the lease."""
        options = self.host.options
        own = definition.turn_timeout if definition is not None else None
        given = [w for w in (options.remote_advance_silence, own) if w is not None]
        return min(given) if given else options.lease

    # ---------------------------------------------------------------- sending a turn

    def decides_here(self, definition: WorkflowDefinition) -> bool:
        """Whether this engine decides the workflow's turns itself (``in_process_turns``, and
        the body is here) rather than send them to its group."""
        return self.host.options.in_process_turns and definition.has_body

    async def send(self, claim: Claim, owner: str, definition: WorkflowDefinition) -> TurnOutcome:
        """Mark the leased run as awaiting a fresh task, release it, then send the task; or,
        for a workflow decided here, replay and apply the turn under this lease."""
        if self.decides_here(definition):
            turn = Turn(self.host, claim, owner, definition)
            return await turn.execute(drive=self._decide_here)
        run, store, now = claim.run, self.host.store, self.host.now()
        task_id = uuid.uuid4().hex
        group = str(definition.group)
        try:
            window = self.silence(definition)
            deadline = now + timedelta(seconds=window)
            task = await self._task(task_id, definition, claim, now, deadline)
            await store.await_decision(run.id, owner, task_id, deadline, now)
        except RunPausing:
            return TurnOutcome("suspended")  # parked paused: no task goes out
        except RunCancelling:
            turn = Turn(self.host, claim, owner, definition)
            return await turn.execute(Settlement(RunStatus.CANCELLED))
        except LeaseLostError:
            return TurnOutcome("abandoned")
        except Exception as exc:
            if not is_infrastructure(exc):
                raise
            # The lease expires and the recovery sends the turn again.
            return TurnOutcome("abandoned", outage=exc)
        self._remember(self._windows, task_id, window)
        try:
            await self.transport.send_tasks(group, [task])
        except Exception as exc:
            # The run is parked until its deadline, when the turn is sent again.
            log.warning("sending workflow task %s of run %s failed (%s)", task_id, run.id, exc)
        return TurnOutcome("suspended", wake_at=deadline)

    async def _task(
        self,
        task_id: str,
        definition: WorkflowDefinition,
        claim: Claim,
        now: datetime,
        deadline: datetime,
    ) -> Message:
        """The workflow task of the run's next turn (the children it waits for read first)."""
        children = await self.host.store.get_runs(awaited_children(claim.steps))
        trace = self.host.tracing.carrier()  # the sending turn's span, when tracing
        group = str(definition.group)
        history, signals = claim.steps, claim.signals
        return workflow_task(
            task_id, claim.run, group, history, signals, children, now, deadline, trace
        )

    # ---------------------------------------------------------------- deciding here

    async def _decide_here(self, turn: Turn) -> tuple[Settlement, bool] | None:
        """The ``drive`` of a turn decided in process: the same task a worker would get, the
        same replay, and its decision parsed and applied as a worker's is, under this turn's
        lease (no release, no transport)."""
        now = turn.now()
        deadline = now + timedelta(seconds=self.silence(turn.definition))
        claim = Claim(turn.run, list(turn.records.values()), turn.signals)
        task = await turn.io(self._task(uuid.uuid4().hex, turn.definition, claim, now, deadline))
        host = WorkerHost(
            {d.name: d for d in self.host.registry.steps},
            pulse=_LeaseHeld(turn),
            clock=self.host.now,
            stats=self.host.stats,
            tracing=self.host.tracing,
        )
        try:
            decided = await replay(task, self.host.registry, host.steps, host=host)
        except Exception as exc:
            log.exception("deciding a turn of run %s in process failed", turn.run.id)
            decided = failed_decision(task, exc)
        # Through the wire format and back: a decision made here passes the checks a worker's
        # does, and is applied by the very same code.
        return await apply_decision(turn, parse_decision(decision_doc(decided, IN_PROCESS)))

    # ---------------------------------------------------------------- decisions

    async def land(self, message: Message) -> None:
        """Apply a decision taken off the results queue (any instance may take it)."""
        try:
            decision = parse_decision(message)
        except Malformed as exc:
            log.warning("dropping a malformed decision: %s", exc)
            return
        self._persisted.pop(decision.task_id, None)
        self._windows.pop(decision.task_id, None)
        await self.host.apply_decision(decision)

    async def heard_beat(self, beat: Message) -> None:
        """A worker replays a turn: push the turn's deadline, written at most once per half
        window (a beat between writes changes nothing the deadline does not already cover)."""
        task_id, run_id = beat.get("task_id"), beat.get("run_id")
        if not isinstance(task_id, str) or not isinstance(run_id, str):
            log.warning("dropping a malformed workflow heartbeat: %.200r", beat)
            return
        try:
            window = await self._window_of(task_id, run_id)
            if time.monotonic() - self._persisted.get(task_id, -window) < window / 2:
                return
            self._remember(self._persisted, task_id, time.monotonic())
            deadline = self.host.now() + timedelta(seconds=window)
            await self.host.store.extend_decision(run_id, task_id, deadline)
        except Exception as exc:
            self._persisted.pop(task_id, None)
            if not is_infrastructure(exc):
                raise
            self.host.outage.failed(exc, "recording a workflow heartbeat")

    async def _window_of(self, task_id: str, run_id: str) -> float:
        """The silence window of a turn out: known when this instance sent it; else that of
        the run's workflow, read once, when some workflow here has a window of its own."""
        known = self._windows.get(task_id)
        if known is not None:
            return known
        if not any(w.turn_timeout is not None for w in self.host.registry.every_version):
            return self.silence()
        run = await self.host.store.get_run(run_id)
        definition = None
        if run is not None:
            with contextlib.suppress(UnknownWorkflowError):  # not ours: the engine's window
                definition = self.host.registry.workflow(run.workflow, run.version)
        window = self.silence(definition)
        self._remember(self._windows, task_id, window)
        return window

    @staticmethod
    def _remember(book: dict[str, float], task_id: str, value: float) -> None:
        if len(book) > PERSISTED_KEEP:
            book.clear()
        book[task_id] = value


class _LeaseHeld:
    """A turn decided in process is live while this engine's lease is (by its clock): past
    it, the replay starts no further local step, as a worker whose beats lapsed does."""

    def __init__(self, turn: Turn) -> None:
        self._turn = turn

    def live(self) -> bool:
        turn = self._turn
        return not turn.host.leases.expired(turn.run.id, turn.now())


async def apply_decision(turn: Turn, decision: Decision) -> tuple[Settlement, bool] | None:
    """Carry out a decision in a turn leased for it (the ``drive`` of ``Turn.execute``)."""
    try:
        again = await _apply_commands(turn, decision)
    except Cancelling:
        return Settlement(RunStatus.CANCELLED), True
    except Pausing:
        return None  # a pause came: what is staged goes with the suspension, which parks it
    except NonDeterminismError as exc:
        # A decision that contradicts the history: the worker's code is not the run's.
        return Settlement(RunStatus.FAILED, None, error_dict(exc)), False
    outcome = decision.outcome
    kind = outcome.get("type")
    if kind == "complete":
        return Settlement(RunStatus.COMPLETED, outcome.get("output")), False
    if kind == "fail":
        error = outcome.get("error")
        failure = error if isinstance(error, dict) else _unexplained()
        return Settlement(RunStatus.FAILED, None, failure), False
    if kind == "continue_as_new":
        return await turn.continued(outcome.get("input")), False
    wake = decision.wake_at()
    if wake is not None:
        turn.wake_by(wake)
    if again:
        turn.wake_by(turn.now())  # something settled while applying: the next turn sees it
    return None


async def _apply_commands(turn: Turn, decision: Decision) -> bool:
    """Stage the decision's records and run its commands; True when a command's outcome is
    already known (a rejected child start, a step settled) and the run is due again now."""
    for record in decision.records:
        known = turn.records.get(record.seq)
        if known is not None and known.done:
            continue  # history is not rewritten
        turn.stage(replace(record, run_id=turn.run.id))
    turn.consume(decision.consumed_signals)
    again = await _children(turn, decision)
    for command in decision.steps:
        op = StepOp(
            turn, int(command["seq"]), _step(turn, command), command.get("input"), _retry(command)
        )
        if await turn.settle_step(op) is not None:
            again = True
    for child_id in decision.cancels:
        await turn.cancel_child(child_id, _sibling_failed())
    return again


async def _children(turn: Turn, decision: Decision) -> bool:
    waited = [_child_op(turn, c) for c in decision.children if c.get("kind") != "start_child"]
    again = any(r is not None for r in (await turn.settle_children(waited)).values())
    for command in decision.children:
        if command.get("kind") == "start_child":
            op = _child_op(turn, command)
            op.kind = StepKind.START_CHILD
            try:
                await turn.start_child(op)
            except Exception as exc:
                if is_infrastructure(exc):
                    raise
                again = True
    return again


def _child_op(turn: Turn, command: Message) -> ChildOp:
    return ChildOp(
        turn,
        int(command["seq"]),
        str(command["workflow"]),
        command.get("input"),
        str(command["child_id"]),
        detached=command.get("detached") is True,
    )


def _step(turn: Turn, command: Message) -> StepDefinition:
    timeout = command.get("timeout")
    return StepDefinition(
        name=str(command["name"]),
        fn=None,
        retry=_retry(command),
        timeout=float(timeout) if isinstance(timeout, int | float) and timeout > 0 else None,
        group=str(command["group"]),
    )


def _retry(command: Message) -> Retry:
    retry = command.get("retry")
    if not isinstance(retry, dict):
        return NO_RETRY
    try:
        return Retry(
            max_attempts=int(retry.get("max_attempts") or 1),
            backoff=float(retry.get("backoff", 1.0)),
            max_backoff=float(retry.get("max_backoff", 60.0)),
        )
    except (TypeError, ValueError):
        return NO_RETRY


def _unexplained() -> dict[str, object]:
    return {"type": "RunlaneError", "message": "the worker failed the run without an error"}


def _sibling_failed() -> dict[str, object]:
    return {"type": "Cancelled", "message": "a sibling failed (fail_fast)"}


__all__ = ["RemoteTurns", "apply_decision"]
