"""Context: everything a workflow body may do, a thin facade over the turn that executes it.

A Context checks the body's arguments and asks its ``Runtime`` (the turn, ``turn.Turn``), which
numbers every operation and replays it from the run's history or executes and records it: the
replay of steps, waits and recorded values lives there, in one place. An operation's sequence
number is taken when the operation is *created* (``ctx.step(...)`` returns an awaitable at
once), so ``ctx.all([ctx.step(f, x) for x in xs])`` numbers its operations in list order on
every replay.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol

from .attributes import AttributeValue, check_attributes
from .definitions import StepDefinition, seconds, workflow_definition
from .errors import ContinueAsNew, DefinitionError, SignalTimeoutError, UpdateTimeoutError
from .models import JSON, Run, Settled, StepKind
from .retry import Retry
from .serialization import normalise
from .updates import Update, signal_name, taken, update_name


class Runtime(Protocol):
    """What a :class:`Context` stands in front of: the turn executing the body (``turn.Turn``).
    Each operation is numbered there (``next_seq``) and replayed from the run's history, or
    executed and recorded."""

    run: Run

    def next_seq(self) -> int: ...

    @property
    def dispatches_remote(self) -> bool:
        """Whether a remote step can be dispatched from this turn."""
        ...

    def resolve_step(
        self, fn_or_name: Callable[..., Any] | str, group: str | None
    ) -> StepDefinition: ...

    async def resolve_one(self, op: Operation) -> JSON: ...

    async def start_child(self, op: ChildOp) -> str: ...

    async def gather(
        self, ops: Sequence[Operation], *, fail_fast: bool, settled: bool
    ) -> list[Any]: ...

    async def sleep(self, delay: float) -> None: ...

    async def sleep_until(self, when: datetime) -> None: ...

    async def wait_for_message(
        self, kind: StepKind, name: str, timeout: float | timedelta | None, expired: type[Exception]
    ) -> JSON: ...

    async def wait_for_event(
        self, name: str, match: Callable[[JSON], bool] | None, timeout: float | timedelta | None
    ) -> JSON: ...

    async def reply(self, update: Update, value: JSON, error: str | None) -> None: ...

    def patched(self, change_id: str) -> bool: ...

    def deprecate_patch(self, change_id: str) -> None: ...

    def recorded_now(self) -> datetime: ...

    async def recorded_side_effect(self, fn: Callable[[], Any]) -> JSON: ...

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None: ...

    async def flush(self) -> object: ...


class Operation:
    """An un-awaited context operation with its sequence number already fixed."""

    kind: StepKind

    def __init__(self, turn: Runtime, seq: int, name: str) -> None:
        self.turn = turn
        self.seq = seq
        self.name = name

    def __await__(self) -> Generator[Any, None, Any]:
        return self.turn.resolve_one(self).__await__()


class StepOp(Operation):
    kind = StepKind.STEP
    priority = 0  # its place among the waiters of its step queue, if it has one
    fairness_key = ""

    def __init__(
        self, turn: Runtime, seq: int, definition: StepDefinition, input: JSON, retry: Retry
    ) -> None:
        super().__init__(turn, seq, definition.name)
        self.definition = definition
        self.input = input
        self.retry = retry


class ChildOp(Operation):
    kind = StepKind.CHILD

    def __init__(
        self,
        turn: Runtime,
        seq: int,
        workflow: Any,
        input: JSON,
        child_id: str,
        *,
        detached: bool = False,
    ) -> None:
        name = workflow if isinstance(workflow, str) else workflow_definition(workflow).name
        super().__init__(turn, seq, name)
        self.workflow = workflow
        self.input = input
        self.child_id = child_id
        self.detached = detached  # a start_child that outlives its parent's cancellation


class AttributesSet:
    """What ``ctx.set_attributes`` returns: awaiting it writes the attributes at once (with
    whatever else the turn has staged); left alone, they go with the turn's next write."""

    def __init__(self, turn: Runtime) -> None:
        self._turn = turn

    def __await__(self) -> Generator[Any, None, None]:
        return self._write().__await__()

    async def _write(self) -> None:
        await self._turn.flush()


class Context:
    """What a workflow body may do. Only use it from the body it was passed to."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @property
    def run_id(self) -> str:
        return self._runtime.run.id

    @property
    def workflow(self) -> str:
        return self._runtime.run.workflow

    @property
    def attempt(self) -> int:
        """1 for the first execution of the run; grows with each recovery after a crash."""
        return self._runtime.run.recoveries + 1

    @property
    def input(self) -> JSON:
        return self._runtime.run.input

    # ---------------------------------------------------------------- steps and children

    def step(
        self,
        fn_or_name: Callable[..., Any] | str,
        input: JSON = None,
        *,
        retry: Retry | None = None,
        timeout: float | timedelta | None = None,
        group: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        fairness_key: str | None = None,
    ) -> StepOp:
        """A checkpointed step; await it (or pass it to ``all``) for its output.

        ``queue`` (default: the step's own) names the step queue that admits it, by
        ``priority`` (higher first) and ``fairness_key`` (default: the run's id)."""
        runtime = self._runtime
        definition = runtime.resolve_step(fn_or_name, group)
        if timeout is not None or group is not None or queue is not None:
            definition = StepDefinition(
                name=definition.name,
                fn=definition.fn,
                retry=definition.retry,
                timeout=seconds(timeout, "timeout") if timeout is not None else definition.timeout,
                group=group or definition.group,
                queue=queue or definition.queue,
            )
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise DefinitionError(f"priority must be an int, not {priority!r}")
        if fairness_key is not None and not isinstance(fairness_key, str):
            raise DefinitionError(f"fairness_key must be a string, not {fairness_key!r}")
        if definition.remote and not runtime.dispatches_remote:
            raise DefinitionError(
                f"step {definition.name!r} is remote (group {definition.group!r}); remote steps"
                " need a transport and a Worker, which this engine does not have"
            )
        value = normalise(input, f"input of step {definition.name!r}")
        op = StepOp(runtime, runtime.next_seq(), definition, value, retry or definition.retry)
        op.priority, op.fairness_key = priority, fairness_key or runtime.run.id
        return op

    def child(self, workflow: Any, input: JSON = None, *, run_id: str | None = None) -> ChildOp:
        """Start (or re-attach to) a child run; await it for the child's output."""
        runtime = self._runtime
        seq = runtime.next_seq()
        value = normalise(input, "input of child workflow")
        return ChildOp(runtime, seq, workflow, value, run_id or f"{runtime.run.id}.child.{seq}")

    async def start_child(
        self,
        workflow: Any,
        input: JSON = None,
        *,
        run_id: str | None = None,
        detached: bool = False,
    ) -> str:
        """Start a child run without waiting for it; returns its id. A cancellation of this
        run reaches the child (and its own children), unless it is ``detached``; a detached
        child's deadline is its own, not bounded by this run's."""
        runtime = self._runtime
        seq = runtime.next_seq()
        value = normalise(input, "input of child workflow")
        child_id = run_id or f"{runtime.run.id}.child.{seq}"
        op = ChildOp(runtime, seq, workflow, value, child_id, detached=bool(detached))
        op.kind = StepKind.START_CHILD
        return await runtime.start_child(op)

    async def all(self, ops: Iterable[Operation], *, fail_fast: bool = False) -> list[JSON]:
        """Outputs of every operation in input order; ``GatherError`` if any failed."""
        return await self._runtime.gather(list(ops), fail_fast=fail_fast, settled=False)

    async def all_settled(self, ops: Iterable[Operation]) -> list[Settled]:
        """A :class:`Settled` per operation, in input order; never raises for a failure."""
        return await self._runtime.gather(list(ops), fail_fast=False, settled=True)

    # ---------------------------------------------------------------- time and waits

    async def sleep(self, duration: float | timedelta) -> None:
        """Durable sleep: the run is suspended and holds no memory until it is due."""
        await self._runtime.sleep(seconds(duration, "sleep duration") or 0.0)

    async def sleep_until(self, when: datetime) -> None:
        """Durable sleep until an aware datetime."""
        if when.tzinfo is None:
            raise DefinitionError("sleep_until needs a timezone-aware datetime")
        await self._runtime.sleep_until(when)

    async def wait_for_signal(self, name: str, *, timeout: float | timedelta | None = None) -> JSON:
        """The payload of the next signal ``name``; ``SignalTimeoutError`` after ``timeout``."""
        return await self._runtime.wait_for_message(
            StepKind.SIGNAL, signal_name(name), timeout, SignalTimeoutError
        )

    async def wait_for_update(
        self, name: str, *, timeout: float | timedelta | None = None
    ) -> Update:
        """The next update ``name`` sent to the run (``engine.update``), oldest first; its
        caller waits until :meth:`reply` answers it. ``UpdateTimeoutError`` after ``timeout``.

        An update sent before the body asks for it waits, buffered, until it does: it wakes
        the run only when the run waits for an update of that name."""
        message = await self._runtime.wait_for_message(
            StepKind.UPDATE, update_name(name), timeout, UpdateTimeoutError
        )
        return taken(name, message)

    async def reply(self, update: Update, value: JSON = None, *, error: str | None = None) -> None:
        """Answer ``update``: its caller gets ``value``, or, with ``error`` (the reason),
        ``UpdateRejectedError``. The answer is checkpointed before this returns, so it is
        durable, and a replay of this call answers nothing again. An update is answered once:
        answering it again raises ``RunlaneError``."""
        if not isinstance(update, Update):
            raise DefinitionError(f"reply answers an Update (from wait_for_update), not {update!r}")
        if error is not None and (not isinstance(error, str) or value is not None):
            raise DefinitionError("reply takes a value, or error= (a string), not both")
        await self._runtime.reply(update, value, error)

    async def wait_for_event(
        self,
        name: str,
        *,
        match: Callable[[JSON], bool] | None = None,
        timeout: float | timedelta | None = None,
    ) -> JSON:
        """The payload of the next event ``name`` published after this wait began."""
        return await self._runtime.wait_for_event(name, match, timeout)

    # ---------------------------------------------------------------- changing code under runs

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the branch of the code change ``change_id``: the way to
        change a workflow's code while runs recorded by the old code are in flight.

        Reached with no recorded history left (the run is new to this point), it records a
        ``patch`` marker here and returns True; replaying a history with that marker here, it
        returns True; replaying one recorded before the change (another operation here), it
        returns False and records nothing, so the old branch replays as it ran. Asked again
        for the same ``change_id``, it answers as it did the first time::

            if ctx.patched("send-receipt"):
                await ctx.step(send_receipt, order)   # new runs
            await ctx.step(ship, order)               # every run
        """
        return self._runtime.patched(_change_id(change_id))

    def deprecate_patch(self, change_id: str) -> None:
        """Mark the change ``change_id`` as one every run in flight already took, once its old
        branch is deleted: records nothing, and replays a history with or without the marker."""
        self._runtime.deprecate_patch(_change_id(change_id))

    # ---------------------------------------------------------------- recorded values

    def now(self) -> datetime:
        """The engine clock's time, recorded once and identical on every replay."""
        return self._runtime.recorded_now()

    async def side_effect(self, fn: Callable[[], Any]) -> JSON:
        """Call ``fn`` once; its JSON result is recorded and replayed identically."""
        return await self._runtime.recorded_side_effect(fn)

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> AttributesSet:
        """Merge ``attributes`` into the run's (a name set again takes the new value; the others
        stay), so that ``list_runs(attributes=...)`` finds the run by them. Values are ``str``,
        ``int``, ``float`` or ``bool``; anything else raises ``SerializationError`` here.

        Recorded in the history like a step's result: a replay finds the record and sets
        nothing again, so the run's attributes are exactly what its code set, once. A plain
        call; they are written with the turn's next write (before its next step starts, or
        when the run waits or ends). Await the call to have them written before it returns::

            ctx.set_attributes({"stage": "shipping"})
            await ctx.set_attributes({"customer": order["customer"]})   # written now
        """
        self._runtime.set_attributes(check_attributes(attributes))
        return AttributesSet(self._runtime)

    def continue_as_new(self, input: JSON = None) -> NoReturn:
        """End this run now; a fresh run ``<id>~N`` continues with ``input``."""
        raise ContinueAsNew(normalise(input, "continue_as_new input"))


def _change_id(change_id: object) -> str:
    if not isinstance(change_id, str) or not change_id:
        raise DefinitionError(f"a patch needs a change id (a non-empty string), got {change_id!r}")
    return change_id


__all__ = ["AttributesSet", "ChildOp", "Context", "Operation", "Runtime", "StepOp"]
