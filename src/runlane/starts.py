"""Starting runs, one or many: a start's checks, its spec, its write, and what came of it.

``Engine.start`` and ``Engine.start_many`` are both this module: a start is checked
(arguments, workflow, input) and its spec built with its gates evaluated, then every start of a
call is written in one store call (``Store.create_runs``: one round trip or transaction for the
lot), and each one's :class:`~runlane.models.Started` is judged as a single start's would be.
So a start in a batch is admitted exactly as it would be alone, and a refused one is that
start's outcome, not the batch's.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeVar

from .attributes import AttributeValue, check_attributes
from .definitions import Concurrency, WorkflowDefinition, check_tags, check_timeout, check_version
from .errors import RunExistsError, RunNotFoundError
from .faults import is_infrastructure
from .models import JSON, Claim, Lease, Run, RunSpec, RunStatus, Started
from .namespaces import sees
from .routing import Reason
from .serialization import normalise

if TYPE_CHECKING:
    from .execution import Execution

T = TypeVar("T")

MOST = 1000
"""Starts written in one store call; a longer ``start_many`` makes one call per slice."""


@dataclass(frozen=True)
class Start:
    """One start of ``Engine.start_many``: ``Engine.start``'s arguments, with its defaults."""

    workflow: Any
    input: JSON = None
    run_id: str | None = None
    concurrency: Concurrency | None = None
    priority: int = 0
    tags: Sequence[str] = ()
    if_exists: Literal["return", "fail"] = "return"
    version: str | None = None
    execution_timeout: float | timedelta | None = None
    attributes: Mapping[str, AttributeValue] | None = None


@dataclass(frozen=True)
class StartOutcome:
    """What one start of a batch came to: its run, or the error ``Engine.start`` would have
    raised for it (``ConcurrencyLimitError``, ``RunExistsError``, ``UnknownWorkflowError``,
    ...). ``created`` is False for a run found by its id or a start folded into a debounced
    run."""

    run: Run | None
    error: Exception | None = None
    created: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def result(self) -> Run:
        """The run, or the start's error raised."""
        if self.error is not None:
            raise self.error
        assert self.run is not None
        return self.run


class Api(Protocol):
    """How the engine makes an API call's store work (``Engine._api``): outages translated."""

    def __call__(
        self, call: Callable[[], Awaitable[T]], *, retry: bool = False
    ) -> Awaitable[T]: ...


class _Checked(NamedTuple):
    """A start whose arguments passed: its workflow, its run id and its checked values."""

    definition: WorkflowDefinition
    run_id: str
    input: JSON
    tags: tuple[str, ...]
    timeout: float | None
    attributes: Mapping[str, AttributeValue]
    concurrency: Concurrency | None
    priority: int
    if_exists: str


class Starts:
    """The engine's starts (its execution side, its namespace fence, its API call wrapper)."""

    def __init__(
        self,
        execution: Execution,
        scope: str | None,
        api: Api,
        ready: Callable[[], Awaitable[None]],
    ) -> None:
        self._execution = execution
        self._scope = scope
        self._api = api
        self._ready = ready

    async def one(
        self,
        workflow: Any,
        input: JSON,
        run_id: str | None,
        concurrency: Concurrency | None,
        priority: int,
        tags: Iterable[str],
        if_exists: Literal["return", "fail"],
        version: str | None,
        execution_timeout: float | timedelta | None,
        attributes: Mapping[str, AttributeValue] | None,
    ) -> Run:
        """``Engine.start``: the run, or the start's error raised. ``many``'s steps for one
        start, without a ``Start`` or a list: a plain start pays nothing for batches."""
        checked = _checked(
            self._execution, workflow, input, run_id, concurrency, priority, tags, if_exists,
            version, execution_timeout, attributes,
        )  # fmt: skip
        await self._ready()
        spec = await self._build(checked)
        [started], retried = await self.create([spec], claim=True)
        run, error, _ = self._judge(checked, spec, started, retried)
        due = self._route(spec, started, retried)
        if due is not None:
            self._execution.send_started((due,))
        if error is not None:
            raise error
        assert run is not None
        return run

    async def many(self, starts: Iterable[Start]) -> list[StartOutcome]:
        """``Engine.start_many``: an outcome per start, in order."""
        if isinstance(starts, Start | str | bytes):
            raise TypeError("start_many takes a list of runlane.Start, not one")
        starts = list(starts)
        if not all(isinstance(s, Start) for s in starts):
            raise TypeError("start_many takes a list of runlane.Start")
        outcomes: list[StartOutcome] = []
        for first in range(0, len(starts), MOST):
            outcomes += await self._slice(starts[first : first + MOST])
        return outcomes

    async def _slice(self, starts: Sequence[Start]) -> list[StartOutcome]:
        checked: list[_Checked | Exception] = [_check(self._execution, s) for s in starts]
        if not any(isinstance(c, _Checked) for c in checked):
            return [StartOutcome(None, c) for c in checked if isinstance(c, Exception)]
        await self._ready()
        specs = _in_order([await self._spec(c) if isinstance(c, _Checked) else c for c in checked])
        given = [s for s in specs if isinstance(s, RunSpec)]
        written, retried = await self.create(given, claim=True)
        found = iter(written)
        outcomes = [
            StartOutcome(None, s)
            if isinstance(s, Exception)
            else StartOutcome(*self._judge(c, s, next(found), retried))
            for c, s in zip(checked, specs, strict=True)
        ]
        self._dispatch(given, written, retried)
        return outcomes

    async def _spec(self, checked: _Checked) -> RunSpec | Exception:
        try:
            return await self._build(checked)
        except Exception as exc:  # a gate's key or limit function, a store that cannot gate
            return exc

    def _build(self, checked: _Checked) -> Awaitable[RunSpec]:
        return self._execution.specs.build(
            checked.definition,
            checked.input,
            checked.run_id,
            concurrency=checked.concurrency,
            priority=checked.priority,
            tags=checked.tags,
            debounce=True,
            execution_timeout=checked.timeout,
            attributes=checked.attributes,
        )

    async def create(self, specs: Sequence[RunSpec], *, claim: bool) -> tuple[list[Started], bool]:
        """Create the specs' runs; after an outage, once more (their ids make it idempotent).
        Also says whether it was tried again. With ``claim``, the runs this instance will
        execute at once (as many as it has room for, the first of the batch) are claimed in the
        write that creates them: no claim of each after it, no message on the run queue."""
        if not specs:
            return [], False
        execution = self._execution
        lease = execution.lease(Reason.START) if claim else None
        claims = execution.room() if lease is not None else 0
        try:
            created = await execution.store.create_runs(
                specs, execution.now(), lease=lease, claims=claims
            )
            return created, False
        except Exception as exc:
            if not is_infrastructure(exc):
                raise
        # The first write may have committed; if it leased a run to us, the turn is ours.
        again = await self._api(lambda: execution.store.create_runs(specs, execution.now()))
        return [_leased(started, lease) for started in again], True

    def _judge(
        self, checked: _Checked | Exception, spec: RunSpec, started: Started, retried: bool
    ) -> tuple[Run | None, Exception | None, bool]:
        """What one written start came to, as ``Engine.start`` tells it: the run, the error,
        whether it was created."""
        assert not isinstance(checked, Exception)
        if started.run is not None and not sees(self._scope, started.run):
            # The id names a run of another namespace: nothing was created, nothing is shown.
            return None, RunNotFoundError(started.run.id), False
        self._execution.count_starts(checked.definition.name, (started,))
        if started.rejected is not None:
            return None, started.rejected, False
        run = started.run
        assert run is not None
        # After an outage, the run found may be the one this start's first write created.
        fresh = started.created or started.debounced or (retried and _same_start(run, spec))
        if not fresh and checked.if_exists == "fail":
            return run, RunExistsError(run.id, run.status), False
        return run, None, started.created

    def _dispatch(self, specs: Sequence[RunSpec], written: list[Started], retried: bool) -> None:
        """The new runs go where they execute (see ``_route``); the due ones in one message."""
        due = [
            run
            for spec, started in zip(specs, written, strict=True)
            if (run := self._route(spec, started, retried)) is not None
        ]
        if due:
            self._execution.send_started(due)

    def _route(self, spec: RunSpec, started: Started, retried: bool) -> Run | None:
        """A new run claimed here goes to its turn; a held one's timer is noted; the run, when
        it is due now (for the run queue or this instance)."""
        run = started.run
        if run is None or started.rejected is not None or not sees(self._scope, run):
            return None
        self._execution.note_held((run,))
        if started.claim is not None:
            self._execution.claimed(started.claim)
            return None
        # After an outage, the run found may be the one this start's first write created.
        ours = retried and _same_start(run, spec)
        return run if (started.created or ours) and not started.waiting else None


def _check(execution: Execution, start: Start) -> _Checked | Exception:
    """A start's arguments checked (nothing written, no store read), or the error to report."""
    try:
        return _checked(
            execution, start.workflow, start.input, start.run_id, start.concurrency,
            start.priority, start.tags, start.if_exists, start.version, start.execution_timeout,
            start.attributes,
        )  # fmt: skip
    except Exception as exc:
        return exc


def _checked(
    execution: Execution,
    workflow: Any,
    input: JSON,
    run_id: str | None,
    concurrency: Concurrency | None,
    priority: int,
    tags: Iterable[str],
    if_exists: str,
    version: str | None,
    execution_timeout: float | timedelta | None,
    attributes: Mapping[str, AttributeValue] | None,
) -> _Checked:
    """A start's arguments checked, before anything is written or read; or the error raised."""
    if if_exists not in ("return", "fail"):
        raise ValueError("if_exists must be 'return' or 'fail'")
    timeout = check_timeout(execution_timeout)
    wanted = None if version is None else check_version(version)
    definition = execution.registry.workflow(workflow, wanted)
    value = normalise(input, f"input of workflow {definition.name!r}")
    indexed = check_attributes(attributes or {})
    return _Checked(
        definition, run_id or uuid.uuid4().hex, value, check_tags(tags), timeout, indexed,
        concurrency, priority, if_exists,
    )  # fmt: skip


def _in_order(specs: list[RunSpec | Exception]) -> list[RunSpec | Exception]:
    """The specs with strictly increasing ``created_at``, so a batch's runs of one key line up
    in the batch's order (a lane's FIFO order is ``(created_at, id)``) even when the clock did
    not move between two of them (a ``ManualClock``, a coarse system clock)."""
    last: datetime | None = None
    for n, spec in enumerate(specs):
        if isinstance(spec, Exception):
            continue
        if last is not None and spec.created_at <= last:
            spec = specs[n] = replace(spec, created_at=last + _TICK)
        last = spec.created_at
    return specs


_TICK = timedelta(microseconds=1)


def _leased(started: Started, lease: Lease | None) -> Started:
    run = started.run
    if lease is not None and run is not None and run.lease_owner == lease.owner:
        return replace(started, claim=Claim(run, [], []))
    return started


def _same_start(run: Run, spec: RunSpec) -> bool:
    """Whether an existing run is the one a start's first (outage-cut) write created."""
    return (
        run.created_at == spec.created_at
        and run.workflow == spec.workflow
        and run.status in (RunStatus.PENDING, RunStatus.BLOCKED)
    )


__all__ = ["MOST", "Start", "StartOutcome", "Starts"]
