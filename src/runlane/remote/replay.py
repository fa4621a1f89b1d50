"""A remote workflow turn on a worker: replay the body against a workflow task's history.

The replay is the engine's own :class:`~runlane.turn.Turn`; only its doors to the store and
the transport are swapped. Writes collect into the decision instead of going to a store,
remote step dispatches and child starts become commands the engine carries out, and children
are read from the outcomes the task carries. Everything else (sequence numbers, recorded
values, local step retries, sleeps, signal waits, non-determinism) is the same code.

A worker replays on a loop of its own (in a thread, :func:`~runlane.concurrency.run_on_own_loop`)
so that a body doing heavy sync work between its awaits does not stall the worker's beats and
steps; the bodies of the local steps it calls still run on the worker's loop (``step_loop``),
as its remote steps do: async ones on that loop, sync ones in its threads.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from ..concurrency import run_on_loop
from ..context import ChildOp, StepOp
from ..definitions import StepDefinition, WorkflowDefinition
from ..errors import (
    RunlaneError,
    Suspend,
    UnknownWorkflowError,
)
from ..errors import error_dict as _error_dict
from ..fences import fence_of
from ..leases import LeaseKeeper
from ..models import (
    JSON,
    Claim,
    Lease,
    RetryTimer,
    Run,
    RunSpec,
    RunStatus,
    Settled,
    Settlement,
    Started,
)
from ..options import EngineOptions
from ..registry import Registry
from ..stats import EngineStats
from ..stores.base import Store
from ..tracing import Tracing
from ..transports.base import Message
from ..turn import Turn, TurnOutcome
from .tasks import (
    Decision,
    child_outcome,
    record_from_doc,
    signal_from_doc,
)


class _NoStore:
    """A worker holds no store connection: anything that would need one fails the turn."""

    def __getattr__(self, name: str) -> Any:
        raise RunlaneError(f"a remote workflow cannot use {name!r} (it needs the engine's store)")


class _NoLeases:
    """A worker's turn holds no lease: the awaited task id is its fence (the engine checks it
    when the decision comes back), so nothing here can run out."""

    def hold(self, run_id: str, owner: str, until: datetime | None = None) -> None:
        pass

    def release(self, run_id: str, owner: str) -> None:
        pass

    def expired(self, run_id: str, now: datetime) -> bool:
        return False

    async def confirm(self, run_id: str, owner: str) -> bool:
        return True


class Liveness(Protocol):
    """Whether the turn being replayed is still the one its engine awaits: once it is not, the
    turn starts no further local step (see ``DecisionTurn.ensure_lease``)."""

    def live(self) -> bool: ...


class Pulse:
    """Whether a turn's heartbeats keep getting out, so that the engine still awaits the turn.

    The engine sends a turn again after ``window`` seconds without a decision or a beat, and
    records a beat's deadline at most once per half window: so while no gap between the beats
    that got out reaches half the window, the turn is still the awaited one. After such a gap
    (the worker was frozen, or cut off from the transport) it may have been sent again, and it
    stays in doubt. Beats go out from the worker's loop; the replay thread asks."""

    def __init__(self, window: float | None) -> None:
        self._limit = window / 2 if window is not None else None
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._lapsed = False

    def beat_sent(self) -> None:
        with self._lock:
            now = time.monotonic()
            if self._limit is not None and now - self._last >= self._limit:
                self._lapsed = True
            self._last = now

    def live(self) -> bool:
        with self._lock:
            if self._limit is None:
                return True
            return not self._lapsed and time.monotonic() - self._last < self._limit


class WorkerHost:
    """What a replayed turn needs on a worker: its steps, a clock, no store.

    An engine deciding a turn in process gives its own clock, liveness (its lease), counters
    and spans; a worker has none of those and uses its wall clock."""

    remote_driver = None

    def __init__(
        self,
        steps: Mapping[str, StepDefinition],
        step_loop: asyncio.AbstractEventLoop | None = None,
        pulse: Liveness | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        stats: EngineStats | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.steps = steps
        self.step_loop = step_loop
        self.pulse = pulse or Pulse(None)
        self.store = cast(Store, _NoStore())
        self.options = EngineOptions()
        self.leases = cast(LeaseKeeper, _NoLeases())
        self._clock = clock
        # A worker serves no /metrics; its step spans join the global provider's traces.
        self.stats = stats or EngineStats()
        self.tracing = tracing or Tracing()

    def now(self) -> datetime:
        return self._clock() if self._clock is not None else datetime.now(UTC)

    def successor_lease(self) -> Lease | None:
        return None

    def admission_retry(self) -> RetryTimer:
        return RetryTimer(1.0, 30.0, 1.0)

    def wake(self, run_ids: Iterable[str]) -> None:
        pass

    def answered(self, run_id: str) -> None:
        pass

    def resolve_step(
        self, fn_or_name: Callable[..., Any] | str, group: str | None
    ) -> StepDefinition:
        if isinstance(fn_or_name, str) and fn_or_name in self.steps:
            return self.steps[fn_or_name]
        return Registry().step(fn_or_name, group)

    async def call_step(self, definition: StepDefinition, input: JSON) -> JSON:
        call = definition.call(input)
        if self.step_loop is None:
            return await call
        return await run_on_loop(call, self.step_loop)

    async def child_spec(
        self, workflow: Any, input: JSON, run_id: str, parent: Run, *, detached: bool = False
    ) -> RunSpec:
        raise AssertionError("children start on the engine")  # pragma: no cover

    async def continuation_spec(self, run: Run, input: JSON) -> RunSpec:
        raise AssertionError("continue-as-new is the engine's")  # pragma: no cover

    async def handler_spec(self, workflow: str, run: Run, settlement: Settlement) -> RunSpec:
        raise AssertionError("failure handlers start on the engine")  # pragma: no cover


class DecisionTurn(Turn):
    """A turn whose writes and side effects become a decision."""

    def __init__(
        self, host: WorkerHost, claim: Claim, definition: WorkflowDefinition, task: Message
    ) -> None:
        super().__init__(host, claim, "worker", definition)  # type: ignore[arg-type]
        self.decision = Decision(str(task["task_id"]), claim.run.id)
        self._children: dict[str, tuple[str, JSON, dict[str, Any] | None]] = {
            str(k): child_outcome(v) for k, v in (task.get("children") or {}).items()
        }
        self._commanded: set[int] = set()  # seqs the engine records (remote steps, children)
        self._pulse = host.pulse

    @property
    def dispatches_remote(self) -> bool:
        return True

    async def flush(self, children: Sequence[RunSpec] = ()) -> list[Started]:
        writes = self._take_writes()
        self._keep([*writes.steps, *self.take_attributes()], writes.consumed_signals)
        return []

    def _keep(self, records: Iterable[Any], consumed: Iterable[int]) -> None:
        kept = {r.seq: r for r in self.decision.records}
        kept.update({r.seq: r for r in records if r.seq not in self._commanded})
        self.decision.records = sorted(kept.values(), key=lambda r: r.seq)
        self.decision.consumed_signals.extend(consumed)

    async def settle_remote(self, op: StepOp) -> Settled | None:
        if op.definition.queue is not None:
            # The engine dispatches a decision's steps without asking a queue: refuse rather
            # than let the step past its queue's limits.
            raise _no_step_queues(op)
        self._commanded.add(op.seq)
        retry = op.retry
        self.decision.steps.append(
            {
                "seq": op.seq,
                "name": op.name,
                "group": op.definition.group,
                "input": op.input,
                "timeout": op.definition.timeout,
                "retry": {
                    "max_attempts": retry.max_attempts,
                    "backoff": retry.backoff,
                    "max_backoff": retry.max_backoff,
                },
            }
        )
        return None

    async def answered(self) -> None:
        """A reply is durable only once the engine applies the decision that carries it: the
        turn ends here, due again at once, so the reply is written (and its caller answered)
        before the body goes on, as on an engine."""
        self.wakes.append(self.now())
        raise Suspend()

    async def ensure_lease(self) -> None:
        """Before a local step starts: a turn whose beats stopped getting out for long enough
        that the engine may have sent it again (its worker was frozen or cut off) starts no
        further step beside the new turn. It ends here, due again at once, with what it ran:
        the engine applies that if it still awaits this turn, and drops it otherwise."""
        if self._pulse.live():
            return
        self.wakes.append(self.now())
        raise Suspend()

    async def admit(self, op: StepOp) -> bool:
        raise _no_step_queues(op)

    async def _start_children(self, ops: Sequence[ChildOp]) -> list[tuple[ChildOp, Started]]:
        for op in ops:
            self._commanded.add(op.seq)
            self.decision.children.append(
                {
                    "seq": op.seq,
                    "kind": str(op.kind),
                    "workflow": op.name,
                    "input": op.input,
                    "child_id": op.child_id,
                    **({"detached": True} if op.detached else {}),
                }
            )
        return [(op, Started(None, True)) for op in ops]

    async def _check_children(self, ops: Sequence[ChildOp]) -> dict[int, Settled | None]:
        results: dict[int, Settled | None] = {}
        for op in ops:
            known = self._children.get(op.child_id)
            if known is None or op.seq in self._commanded:
                results[op.seq] = None  # started this turn, or not finished yet
                continue
            status, output, error = known
            child = _child_run(op.child_id, status, output, error, self.now())
            results[op.seq] = self._child_result(op, child)
        return results

    async def _cancel_waiting(self, ops: Sequence[Any], results: Sequence[Settled | None]) -> None:
        for op, result in zip(ops, results, strict=True):
            if result is None and isinstance(op, ChildOp):
                self.decision.cancels.append(op.child_id)

    async def continued(self, input: JSON) -> Settlement:
        self.decision.outcome = {"type": "continue_as_new", "input": input}
        return Settlement(RunStatus.COMPLETED)

    async def _suspend(self) -> TurnOutcome:
        await self.flush()
        wake = min(self.wakes) if self.wakes else None
        self.decision.outcome = {"type": "suspend", "wake_at": wake.isoformat() if wake else None}
        return TurnOutcome("suspended", wake_at=wake)

    async def _finish(self, settlement: Settlement, discard: bool = False) -> TurnOutcome:
        await self.flush()
        if self.decision.outcome.get("type") == "continue_as_new":
            pass
        elif settlement.status == RunStatus.COMPLETED:
            self.decision.outcome = {"type": "complete", "output": settlement.output}
        else:
            self.decision.outcome = {"type": "fail", "error": settlement.error}
        return TurnOutcome("settled", status=settlement.status)


def _no_step_queues(op: StepOp) -> RunlaneError:
    return RunlaneError(f"step {op.name!r}: step queues are not available to remote workflows")


def _child_run(
    child_id: str, status: str, output: JSON, error: dict[str, Any] | None, now: datetime
) -> Run | None:
    if status not in set(RunStatus):
        return None
    return Run(
        child_id, "", "", RunStatus(status), None, output, error, (), now, now, None, None, None, 0
    )


async def replay(
    task: Message,
    workflows: Registry,
    steps: Mapping[str, StepDefinition],
    step_loop: asyncio.AbstractEventLoop | None = None,
    pulse: Liveness | None = None,
    *,
    host: WorkerHost | None = None,
) -> Decision:
    """Replay the task's workflow body against its history: the decision for the turn. Local
    step bodies run on ``step_loop`` when given (else on this loop); with ``pulse``, no local
    step starts once the turn's beats lapsed. ``host`` replaces the worker's own (an engine
    deciding the turn in process)."""
    run_id = str(task["run_id"])
    try:
        definition = workflows.workflow(str(task["workflow"]), str(task.get("version") or "1"))
    except UnknownWorkflowError as exc:
        return Decision(str(task["task_id"]), run_id, outcome=_failed(exc))
    claim = Claim(
        _task_run(task),
        [record_from_doc(run_id, doc) for doc in task.get("history") or []],
        [signal_from_doc(run_id, doc) for doc in task.get("signals") or []],
    )
    turn = DecisionTurn(host or WorkerHost(steps, step_loop, pulse), claim, definition, task)
    await turn.execute()
    return turn.decision


def failed_decision(task: Message, exc: BaseException) -> Decision:
    """The decision for a turn whose replay itself broke (not the body: its exceptions fail
    the run through the body's own outcome): the run fails with the error."""
    return Decision(
        str(task["task_id"]),
        str(task["run_id"]),
        outcome={"type": "fail", "error": _error_dict(exc)},
    )


def _task_run(task: Message) -> Run:
    now = datetime.now(UTC)
    return Run(
        id=str(task["run_id"]),
        workflow=str(task["workflow"]),
        version=str(task.get("version") or "1"),
        status=RunStatus.RUNNING,
        input=task.get("input"),
        output=None,
        error=None,
        tags=(),
        created_at=now,
        updated_at=now,
        wake_at=None,
        parent_id=None,
        namespace=None,
        priority=int(task.get("priority") or 0),
        recoveries=int(task.get("attempt") or 1) - 1,
        fence=fence_of(task) or 0,  # the fence the turn's local steps present
    )


def _failed(exc: BaseException) -> Message:
    return {"type": "fail", "error": _error_dict(exc, with_traceback=False)}


__all__ = ["DecisionTurn", "Liveness", "Pulse", "WorkerHost", "failed_decision", "replay"]
