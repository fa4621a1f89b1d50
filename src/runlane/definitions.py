"""Workflow and step decorators, and the frozen definitions they attach.

Everything is validated here, at decoration time, so a mistake fails at import and not in the
middle of a run.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeVar, overload

from .concurrency import call_step_body
from .errors import DefinitionError, StepTimeoutError, UnknownStepError
from .models import ACTIVE_STATUSES, RunStatus
from .retry import NO_RETRY, Retry

F = TypeVar("F", bound=Callable[..., Any])

WORKFLOW_ATTR = "__runlane_workflow__"
STEP_ATTR = "__runlane_step__"
RESERVED_TAG_PREFIX = "runlane:"

Seconds = float | int | timedelta
LimitSource = int | Callable[[str], int] | Callable[[str], Awaitable[int]]


def check_timeout(value: Seconds | None, what: str = "execution_timeout") -> float | None:
    """A timeout given to a call: None, or a positive, finite number of seconds (or a
    timedelta); anything else is a ``ValueError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise ValueError(f"{what} must be a number of seconds or a timedelta, got {value!r}")
    try:
        result = as_seconds(value)
    except OverflowError:  # an int too large for a float
        result = math.inf
    if not 0 < result < math.inf:
        raise ValueError(f"{what} must be a positive, finite number of seconds, got {value!r}")
    return result


def seconds(value: Seconds | None, what: str = "duration") -> float | None:
    """A duration a definition or a body's call gives (a timeout, a sleep): None, or seconds
    that are not negative; anything else is a ``DefinitionError``."""
    if value is None:
        return None
    try:
        result = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except (TypeError, ValueError) as exc:
        raise DefinitionError(str(exc)) from None
    if result < 0:
        raise DefinitionError(f"{what} must not be negative, got {value!r}")
    return result


@dataclass(frozen=True)
class Singleton:
    """At most ``limit`` runs per ``key(input)`` in flight; the rest wait FIFO.

    ``scope="workflow"`` (the default): a key's slots are shared by this workflow's runs only.
    ``scope="global"``: by the runs of every workflow that declares the key with this scope.
    """

    key: Callable[[Any], str]
    limit: int = 1
    max_queue_depth: int | None = None
    on_busy: Literal["queue", "reject", "replace"] = "queue"
    scope: Literal["workflow", "global"] = "workflow"

    def __post_init__(self) -> None:
        if not callable(self.key):
            raise DefinitionError("Singleton.key must be a callable of the input")
        if self.limit < 1:
            raise DefinitionError("Singleton.limit must be at least 1")
        if self.max_queue_depth is not None and self.max_queue_depth < 0:
            raise DefinitionError("Singleton.max_queue_depth must not be negative")
        if self.on_busy not in ("queue", "reject", "replace"):
            raise DefinitionError("Singleton.on_busy must be 'queue', 'reject' or 'replace'")
        if self.scope not in ("workflow", "global"):
            raise DefinitionError("Singleton.scope must be 'workflow' or 'global'")

    @property
    def queue_depth(self) -> int | None:
        return 0 if self.on_busy == "reject" else self.max_queue_depth


DEFAULT_CONCURRENCY_STATUSES: frozenset[RunStatus] = ACTIVE_STATUSES
"""The statuses a quota counts when its ``Concurrency`` names none: every status of a run that
is not finished (a run parked on a signal or waiting for a slot still holds its share)."""
# ``paused`` belongs here too once RunStatus has it (it will be one of ACTIVE_STATUSES).


@dataclass(frozen=True)
class Concurrency:
    """A reject-fast quota: at most ``limit`` counted runs share ``key``, across workflows.
    ``count_statuses`` defaults to :data:`DEFAULT_CONCURRENCY_STATUSES`."""

    key: str | Callable[[Any], str | None] | None
    limit: LimitSource
    count_statuses: Iterable[RunStatus | str] | None = None

    def __post_init__(self) -> None:
        if not (self.key is None or isinstance(self.key, str) or callable(self.key)):
            raise DefinitionError("Concurrency.key must be a string or a callable of the input")
        if not (isinstance(self.limit, int) or callable(self.limit)):
            raise DefinitionError("Concurrency.limit must be an int or a callable of the key")
        if self.count_statuses is not None:
            statuses = frozenset(RunStatus(s) for s in self.count_statuses)
            terminal = [s for s in statuses if s.is_terminal]
            if terminal:
                raise DefinitionError(
                    f"count_statuses may only name active statuses, not {terminal}"
                )
            object.__setattr__(self, "count_statuses", statuses)

    @property
    def statuses(self) -> frozenset[RunStatus]:
        if not self.count_statuses:
            return DEFAULT_CONCURRENCY_STATUSES
        return frozenset(RunStatus(s) for s in self.count_statuses)


MAX_LIMIT = 2**31 - 1
"""The largest rate limit or step queue concurrency: what every store keeps (a PostgreSQL
``integer``)."""

MIN_PERIOD = 1e-6
MAX_PERIOD = timedelta(days=36_525).total_seconds()
"""A rate limit's or debounce's period (and ``max_wait``) lies between a microsecond (the
stores' resolution) and a hundred years (an instant that far ahead is still a date)."""


def as_seconds(value: Seconds) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _period(value: Seconds, what: str) -> float:
    """A window's length in seconds, from ``MIN_PERIOD`` to ``MAX_PERIOD``."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise DefinitionError(f"{what} must be a number of seconds or a timedelta, got {value!r}")
    try:
        result = as_seconds(value)
    except OverflowError:  # an int too large for a float
        result = math.inf
    if not result > 0:
        raise DefinitionError(f"{what} must be positive, got {value!r}")
    if not MIN_PERIOD <= result <= MAX_PERIOD:
        raise DefinitionError(
            f"{what} must be from {MIN_PERIOD:g} s to {MAX_PERIOD:g} s (100 years), got {value!r}"
        )
    return result


def whole_limit(value: object) -> bool:
    """Whether ``value`` is a whole number from 1 to ``MAX_LIMIT`` (a bool is not)."""
    return not isinstance(value, bool) and isinstance(value, int) and 1 <= value <= MAX_LIMIT


def _key_function(key: object, what: str) -> None:
    if key is not None and not callable(key):
        raise DefinitionError(f"{what}.key must be a callable of the input, or None")


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` starts per ``key(input)`` in any sliding window of ``period`` seconds.

    ``on_limit="reject"``: a start over the limit raises ``RateLimitError`` and writes nothing.
    ``on_limit="delay"`` (a throttle): every start is accepted, and its run begins at the first
    instant the window allows, in order per key. ``key=None``: one limit for the whole workflow;
    a key function that returns None leaves that start unlimited.
    """

    limit: int
    period: Seconds
    key: Callable[[Any], str | None] | None = None
    on_limit: Literal["reject", "delay"] = "reject"

    def __post_init__(self) -> None:
        if not whole_limit(self.limit):
            raise DefinitionError(
                f"RateLimit.limit must be a whole number from 1 to {MAX_LIMIT}, got {self.limit!r}"
            )
        object.__setattr__(self, "period", _period(self.period, "RateLimit.period"))
        _key_function(self.key, "RateLimit")
        if self.on_limit not in ("reject", "delay"):
            raise DefinitionError("RateLimit.on_limit must be 'reject' or 'delay'")


@dataclass(frozen=True)
class Debounce:
    """Starts of one ``key(input)`` that come while its run has not begun fold into that run.

    A start for a key whose debounced run has not begun replaces the run's input (the last one
    wins) and moves its beginning to ``period`` seconds later, but never past ``max_wait``
    seconds after the first of them. ``key=None``: one debounced run for the whole workflow; a
    key function that returns None leaves that start undebounced.
    """

    key: Callable[[Any], str | None] | None
    period: Seconds
    max_wait: Seconds | None = None

    def __post_init__(self) -> None:
        _key_function(self.key, "Debounce")
        object.__setattr__(self, "period", _period(self.period, "Debounce.period"))
        if self.max_wait is not None:
            max_wait = _period(self.max_wait, "Debounce.max_wait")
            if max_wait < as_seconds(self.period):
                raise DefinitionError("Debounce.max_wait must not be shorter than its period")
            object.__setattr__(self, "max_wait", max_wait)


@dataclass(frozen=True)
class StepDefinition:
    name: str
    fn: Callable[..., Any] | None
    retry: Retry = NO_RETRY
    timeout: float | None = None
    group: str | None = None
    queue: str | None = None  # the step queue that admits its attempts (see step_queues.py)

    @property
    def is_async(self) -> bool:
        return self.fn is not None and inspect.iscoroutinefunction(self.fn)

    @property
    def remote(self) -> bool:
        return self.group is not None

    async def call(self, input: Any) -> Any:
        """Run the body here (a sync one in a thread), within the step's ``timeout``."""
        if self.fn is None:
            raise UnknownStepError(self.name)
        call = call_step_body(self.fn, input)
        if self.timeout is None:
            return await call
        try:
            return await asyncio.wait_for(call, self.timeout)
        except TimeoutError:
            raise StepTimeoutError(
                f"step {self.name!r} did not finish within {self.timeout}s"
            ) from None


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    version: str
    fn: Callable[..., Awaitable[Any]]
    singleton: Singleton | None = None
    concurrency: Concurrency | None = None
    execution_timeout: float | None = None
    on_event: tuple[str, ...] = ()
    rate_limit: RateLimit | None = None
    debounce: Debounce | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    on_failure: str | None = None
    dead_letter: str | None = None
    # A remote workflow: its turns run on Workers of this group, never in the engine.
    group: str | None = None
    # A remote workflow's own silence window (seconds): see ``RemoteWorkflow``.
    turn_timeout: float | None = None
    # The handlers given as decorated workflows: an engine that registers this workflow
    # registers them too, unless it registers a workflow of that name itself.
    given_handlers: tuple[WorkflowDefinition, ...] = field(default=(), compare=False, repr=False)

    def handler(self, status: RunStatus) -> str | None:
        """The workflow a run that ended ``status`` starts: ``on_failure`` for a failed run,
        ``dead_letter`` (else ``on_failure``) for a dead one, none otherwise."""
        if status == RunStatus.FAILED:
            return self.on_failure
        if status == RunStatus.DEAD:
            return self.dead_letter or self.on_failure
        return None

    @property
    def handlers(self) -> tuple[str, ...]:
        return tuple(h for h in (self.on_failure, self.dead_letter) if h is not None)

    @property
    def has_body(self) -> bool:
        """Whether the body is here: a ``RemoteWorkflow`` declaration has none."""
        return self.fn is not _remote_body


def check_tags(tags: Iterable[str]) -> tuple[str, ...]:
    result = tuple(tags)
    for tag in result:
        if not isinstance(tag, str) or not tag:
            raise DefinitionError(f"tags must be non-empty strings, got {tag!r}")
        if tag.startswith(RESERVED_TAG_PREFIX):
            raise DefinitionError(f"tag {tag!r} uses the reserved prefix {RESERVED_TAG_PREFIX!r}")
    return result


@overload
def workflow(fn: F, /) -> F: ...
@overload
def workflow(
    *,
    name: str | None = None,
    version: str = "1",
    singleton: Singleton | None = None,
    concurrency: Concurrency | None = None,
    execution_timeout: Seconds | None = None,
    on_event: Iterable[str] = (),
    tags: Iterable[str] = (),
    on_failure: str | Callable[..., Any] | None = None,
    dead_letter: str | Callable[..., Any] | None = None,
    rate_limit: RateLimit | None = None,
    debounce: Debounce | None = None,
    group: str | None = None,
) -> Callable[[F], F]: ...
def workflow(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    version: str = "1",
    singleton: Singleton | None = None,
    concurrency: Concurrency | None = None,
    execution_timeout: Seconds | None = None,
    on_event: Iterable[str] = (),
    tags: Iterable[str] = (),
    on_failure: str | Callable[..., Any] | None = None,
    dead_letter: str | Callable[..., Any] | None = None,
    rate_limit: RateLimit | None = None,
    debounce: Debounce | None = None,
    group: str | None = None,
) -> F | Callable[[F], F]:
    """Declare an ``async def body(ctx, input)`` as a durable workflow.

    ``on_failure`` and ``dead_letter`` name the workflows (by name, or the decorated function)
    that a failed, respectively dead, run starts; see docs/features/failures.md.
    """
    checked_tags = check_tags(tags)
    _check_group(group)
    failure, failure_definition = _handler("on_failure", on_failure)
    dead, dead_definition = _handler("dead_letter", dead_letter)
    given = tuple(d for d in (failure_definition, dead_definition) if d is not None)

    def decorate(body: F) -> F:
        if not inspect.iscoroutinefunction(body):
            raise DefinitionError(f"workflow {body.__qualname__} must be an 'async def' function")
        _check_arity(body, (2,), "a workflow body takes (ctx, input)")
        if singleton is not None and not isinstance(singleton, Singleton):
            raise DefinitionError("singleton= takes a runlane.Singleton")
        if concurrency is not None and not isinstance(concurrency, Concurrency):
            raise DefinitionError("concurrency= takes a runlane.Concurrency")
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise DefinitionError("rate_limit= takes a runlane.RateLimit")
        if debounce is not None and not isinstance(debounce, Debounce):
            raise DefinitionError("debounce= takes a runlane.Debounce")
        events = (on_event,) if isinstance(on_event, str) else tuple(on_event)
        workflow_name = name or body.__name__
        if workflow_name in (failure, dead):
            raise DefinitionError(f"workflow {workflow_name!r} cannot be its own failure handler")
        definition = WorkflowDefinition(
            name=workflow_name,
            version=check_version(version),
            fn=body,
            singleton=singleton,
            concurrency=concurrency,
            execution_timeout=seconds(execution_timeout, "execution_timeout"),
            on_event=events,
            tags=checked_tags,
            on_failure=failure,
            dead_letter=dead,
            given_handlers=given,
            rate_limit=rate_limit,
            debounce=debounce,
            group=group,
        )
        setattr(body, WORKFLOW_ATTR, definition)
        return body

    return decorate(fn) if fn is not None else decorate


def check_version(version: object) -> str:
    """A workflow version: a non-empty string (an int is taken as its digits) without ``@``,
    which separates a workflow's name from its version where the two travel as one code."""
    text = str(version) if isinstance(version, int) and not isinstance(version, bool) else version
    if not isinstance(text, str) or not text or "@" in text or text != text.strip():
        raise DefinitionError(
            f"version= takes a non-empty string without '@' or surrounding spaces, got {version!r}"
        )
    return text


def _check_group(group: str | None) -> None:
    if group is not None and (not isinstance(group, str) or not group):
        raise DefinitionError(f"group= takes the name of a worker group, got {group!r}")


async def _remote_body(ctx: Any, input: Any) -> Any:
    raise DefinitionError("a RemoteWorkflow's body runs on its workers, never in the engine")


def RemoteWorkflow(
    name: str,
    group: str,
    version: str = "1",
    singleton: Singleton | None = None,
    concurrency: Concurrency | None = None,
    on_failure: str | None = None,
    turn_timeout: Seconds | None = None,
    dead_letter: str | None = None,
) -> WorkflowDefinition:
    """A remote workflow declared by an engine that does not have its code: its turns go to
    the Workers of ``group``, which register the decorated body under the same name.
    ``on_failure`` and ``dead_letter`` name handler workflows, as on ``@workflow``.

    ``turn_timeout`` is this workflow's silence window: a turn with neither a decision nor a
    worker's heartbeat for that long is sent again. Where the engine's
    ``remote_advance_silence`` is set too, the shorter of the two wins; with neither, the
    window is the engine's lease."""
    if not isinstance(name, str) or not name:
        raise DefinitionError(f"a RemoteWorkflow needs a name, got {name!r}")
    if group is None:
        raise DefinitionError(f"RemoteWorkflow {name!r} needs a group")
    _check_group(group)
    window = _turn_timeout(name, turn_timeout)
    for option, handler in (("on_failure", on_failure), ("dead_letter", dead_letter)):
        if handler is not None and (not isinstance(handler, str) or not handler):
            raise DefinitionError(f"{option}= takes a workflow name")
        if handler == name:
            raise DefinitionError(f"workflow {name!r} cannot be its own failure handler")
    return WorkflowDefinition(
        name=name,
        version=check_version(version),
        fn=_remote_body,
        singleton=singleton,
        concurrency=concurrency,
        on_failure=on_failure,
        dead_letter=dead_letter,
        group=group,
        turn_timeout=window,
    )


def _turn_timeout(name: str, value: Seconds | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise DefinitionError(
            f"RemoteWorkflow {name!r}: turn_timeout must be seconds or a timedelta, got {value!r}"
        )
    window = as_seconds(value)
    if not math.isfinite(window) or window <= 0:
        raise DefinitionError(f"RemoteWorkflow {name!r}: turn_timeout must be positive")
    return window


def _handler(
    option: str, handler: str | Callable[..., Any] | None
) -> tuple[str | None, WorkflowDefinition | None]:
    """The workflow a handler option names (a non-empty name or a decorated workflow), and
    its definition when it was given as a workflow."""
    if handler is None or (isinstance(handler, str) and handler):
        return handler, None
    definition = getattr(handler, WORKFLOW_ATTR, None)
    if not isinstance(definition, WorkflowDefinition):
        raise DefinitionError(
            f"{option}= takes a workflow name or a @runlane.workflow function, got {handler!r}"
        )
    return definition.name, definition


@overload
def step(fn: F, /) -> F: ...
@overload
def step(
    *,
    name: str | None = None,
    retry: Retry | None = None,
    timeout: Seconds | None = None,
    group: str | None = None,
    queue: str | None = None,
) -> Callable[[F], F]: ...
def step(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    retry: Retry | None = None,
    timeout: Seconds | None = None,
    group: str | None = None,
    queue: str | None = None,
) -> F | Callable[[F], F]:
    """Declare a function of one JSON input as a checkpointed step."""

    def decorate(body: F) -> F:
        if not callable(body):
            raise DefinitionError("a step must be a function")
        _check_arity(body, (1, 0), "a step takes one input, or none")
        if name is None:
            _check_not_nested(body, "step")
        if retry is not None and not isinstance(retry, Retry):
            raise DefinitionError("retry= takes a runlane.Retry")
        if queue is not None and (not isinstance(queue, str) or not queue):
            raise DefinitionError("queue= takes the name of a StepQueue")
        definition = StepDefinition(
            name=name or f"{body.__module__}.{body.__qualname__}",
            fn=body,
            retry=retry or NO_RETRY,
            timeout=seconds(timeout, "timeout"),
            group=group,
            queue=queue,
        )
        setattr(body, STEP_ATTR, definition)
        return body

    return decorate(fn) if fn is not None else decorate


def _check_arity(body: Callable[..., Any], counts: tuple[int, ...], rule: str) -> None:
    """Refuse a body that cannot be called with any of ``counts`` positional arguments."""
    try:
        signature = inspect.signature(body)
    except (TypeError, ValueError):  # a builtin without a signature: let the call tell
        return
    for count in counts:
        try:
            signature.bind(*([None] * count))
            return
        except TypeError:
            continue
    raise DefinitionError(f"{body.__qualname__}{signature}: {rule}")


def _check_not_nested(body: Callable[..., Any], kind: str) -> None:
    """A step's default name is its import path; one defined inside a function has none that
    a worker or another engine could resolve, so it must be given a name. (A workflow's default
    name is its plain ``__name__``, which resolves wherever the workflow is registered.)"""
    if "<locals>" in body.__qualname__:
        raise DefinitionError(
            f"{kind} {body.__qualname__} is defined inside a function: give it a name="
            " (its default name would not resolve on a worker or another engine)"
        )


def workflow_definition(obj: Any) -> WorkflowDefinition:
    definition = getattr(obj, WORKFLOW_ATTR, None)
    if not isinstance(definition, WorkflowDefinition):
        raise DefinitionError(f"{obj!r} is not decorated with @runlane.workflow")
    return definition


def step_definition(obj: Any) -> StepDefinition:
    """The definition of a decorated step; plain functions get a default one."""
    definition = getattr(obj, STEP_ATTR, None)
    if isinstance(definition, StepDefinition):
        return definition
    if callable(obj):
        return StepDefinition(name=f"{obj.__module__}.{obj.__qualname__}", fn=obj)
    raise DefinitionError(f"{obj!r} is not a step")
