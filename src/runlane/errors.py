"""Every error runlane raises, under one root.

Each class's docstring is its default message. Errors that cross the store (a failed step, a
rejected child start) are rebuilt from their ``to_dict`` form on replay, so their constructor
arguments are kept as attributes.
"""

from __future__ import annotations

import builtins
import traceback
from datetime import datetime
from typing import Any


class RunlaneError(Exception):
    """A runlane error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class SerializationError(RunlaneError, TypeError):
    """A value runlane would store (a run's input or output, a signal or event payload, a
    step's input or result) is refused, before anything is written: it is not JSON (a dict with
    string keys, list, str, int, float, bool or None; no NaN or infinity), it nests more than
    100 levels deep (a cycle is refused the same way), it holds a lone surrogate, or its JSON
    text takes more than 4 MiB (4,194,304 bytes of UTF-8), or it is an object with the key
    ``$encoded`` (reserved for encoded payloads). Run attributes are refused the same way when
    they are not a mapping of non-empty string names to ``str``, ``int`` (signed 64-bit), finite
    ``float`` or ``bool``, or hold a NUL character. The message names where the offending value
    is."""


class UnknownWorkflowError(RunlaneError, LookupError):
    """No workflow with this name is registered on the engine."""

    def __init__(self, workflow: str) -> None:
        self.workflow = workflow
        super().__init__(f"unknown workflow {workflow!r}")


class UnknownStepError(RunlaneError, LookupError):
    """No step with this name is registered on the engine."""

    def __init__(self, step: str) -> None:
        self.step = step
        super().__init__(f"unknown step {step!r}")


class RunNotFoundError(RunlaneError, LookupError):
    """No run with this id exists."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run with id {run_id!r}")


class ScheduleNotFoundError(RunlaneError, LookupError):
    """No schedule with this id exists."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"no schedule with id {schedule_id!r}")


class RunFinishedError(RunlaneError):
    """The run is already terminal and cannot take this operation."""

    def __init__(self, run_id: str, status: str, message: str | None = None) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(message or f"run {run_id!r} is already {status}")


class RunExistsError(RunlaneError):
    """A run with this id already exists."""

    def __init__(self, run_id: str, status: str, message: str | None = None) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(message or f"run {run_id!r} already exists (status {status})")


def not_requeueable(run_id: str, status: str) -> RunlaneError:
    """Why ``requeue`` refuses a run that is neither failed, dead nor cancelled: a completed run
    is finished for good (``RunFinishedError``); any other is still live (``RunExistsError``)."""
    message = f"run {run_id!r} is {status}; only failed, dead or cancelled runs can be requeued"
    if status == "completed":
        return RunFinishedError(run_id, status, message)
    return RunExistsError(run_id, status, message)


class DefinitionError(RunlaneError, TypeError, ValueError):
    """A definition is invalid: a workflow, a step, a retry policy, a queue, a schedule. Raised
    where it is built, before anything runs; a ``TypeError`` (a wrong kind of value) and a
    ``ValueError`` (a wrong value) alike."""


class ConcurrencyLimitError(RunlaneError):
    """The concurrency quota for this key is full; the start was refused and nothing was created."""

    http_status = 429

    def __init__(self, workflow: str, key: str, limit: int, active: int) -> None:
        self.workflow = workflow
        self.key = key
        self.limit = limit
        self.active = active
        super().__init__(
            f"concurrency limit reached for key {key!r}: {active} active >= limit {limit}"
            f" (workflow {workflow!r})"
        )


class SingletonQueueFullError(RunlaneError):
    """The singleton key's backlog is full; the start was refused and nothing was created."""

    http_status = 429

    def __init__(self, workflow: str, key: str, max_queue_depth: int) -> None:
        self.workflow = workflow
        self.key = key
        self.max_queue_depth = max_queue_depth
        super().__init__(
            f"singleton queue for key {key!r} is full (max_queue_depth={max_queue_depth},"
            f" workflow {workflow!r})"
        )


class RateLimitError(RunlaneError):
    """The rate limit for this key is used up; the start was refused and nothing was created.

    ``retry_after``: seconds until a start of the key would be accepted (if no other comes first).
    ``key`` is None for a limit on the whole workflow.
    """

    http_status = 429

    def __init__(
        self, workflow: str, key: str | None, limit: int, period: float, retry_after: float
    ) -> None:
        self.workflow = workflow
        self.key = key
        self.limit = limit
        self.period = period
        self.retry_after = retry_after
        what = f"key {key!r}" if key is not None else "the workflow"
        super().__init__(
            f"rate limit reached for {what}: {limit} starts per {period:g}s"
            f" (workflow {workflow!r}); retry after {retry_after:.3f}s"
        )


class KeyFunctionError(RunlaneError, ValueError):
    """A gate's key function (a singleton's, a quota's, a rate limit's or a debounce's
    ``key``) raised on a start's input, or gave no usable key: the input does not fit the
    workflow, and nothing was written.

    ``workflow`` names the workflow, ``gate`` the rule (``"singleton"``, ``"concurrency"``,
    ``"rate limit"``, ``"debounce"``), ``reason`` what went wrong (``"KeyError: 'store'"``);
    the key function's own exception, if it raised, is ``__cause__``.
    """

    def __init__(self, workflow: str, gate: str, reason: str) -> None:
        self.workflow = workflow
        self.gate = gate
        self.reason = reason
        super().__init__(
            f"the {gate} key of workflow {workflow!r} cannot be worked out from this input:"
            f" {reason}"
        )


class MissingExtraError(RunlaneError, ImportError):
    """A feature needs an optional dependency that is not installed."""

    def __init__(self, feature: str, extra: str, missing: str | None = None) -> None:
        self.feature = feature
        self.extra = extra
        super().__init__(f"{feature} needs the {extra} extra: pip install 'runlane[{extra}]'")
        self.name = missing


class ConfigurationError(RunlaneError, ValueError):
    """runlane is not configured for this: no store named, or an option that cannot work."""


class UnsupportedStoreError(RunlaneError):
    """This store cannot perform the requested operation atomically."""


class FatalError(RunlaneError):
    """A step failed in a way that retrying cannot fix; it is never retried."""


class PayloadCodecError(FatalError):
    """A stored or received payload does not decode: it was encoded with a codec (a key) this
    engine or worker does not have, or this side has no codec at all. ``subject`` names whose
    payload it is (``run 'order-42'``, ``event #7 'paid'``) and ``what`` which one (its input,
    a step's output); ``reason`` is the codec's own complaint. A run whose payloads do not
    decode fails with it; it is never retried (fix the keys, then requeue the run)."""

    def __init__(self, subject: str, what: str, reason: str) -> None:
        self.subject = subject
        self.what = what
        self.reason = reason
        super().__init__(f"{subject}: the {what} does not decode ({reason})")


class NonDeterminismError(RunlaneError):
    """The workflow body diverged from its recorded history on replay.

    ``seq`` is the position (the operation's sequence number), ``recorded`` what the history
    holds there and ``new`` what the code now does, each as ``<kind> '<name>'``."""

    def __init__(
        self,
        message: str | None = None,
        *,
        run_id: str | None = None,
        seq: int | None = None,
        recorded: str | None = None,
        new: str | None = None,
    ) -> None:
        self.run_id, self.seq, self.recorded, self.new = run_id, seq, recorded, new
        if message is None and seq is not None:
            message = f"run {run_id!r} op #{seq}: history has {recorded}, the code now does {new}"
        super().__init__(message)


class SignalTimeoutError(RunlaneError, TimeoutError):
    """No signal arrived before the wait's timeout."""


class EventTimeoutError(RunlaneError, TimeoutError):
    """No matching event arrived before the wait's timeout."""


class UpdateTimeoutError(RunlaneError, TimeoutError):
    """No update arrived before the wait's timeout (``ctx.wait_for_update``)."""


class UpdateRejectedError(RunlaneError):
    """The update was not answered with a value: the workflow rejected it
    (``ctx.reply(update, error=...)``: ``message`` is its reason), or the run ended (completed,
    failed, was cancelled or died) without answering it, or had ended before it was sent.

    ``run_id`` and ``name`` say which update."""

    def __init__(self, run_id: str, name: str, message: str | None = None) -> None:
        self.run_id = run_id
        self.name = name
        super().__init__(message or f"update {name!r} of run {run_id!r} was rejected")


class NotInStepError(RunlaneError, LookupError):
    """runlane.step_context() was called outside a step's function: only a step that runs (on
    an engine or on a worker) has a fence, a run id, a seq and an attempt."""


class StepTimeoutError(RunlaneError, TimeoutError):
    """A step did not finish within its timeout."""


class ExecutionTimeoutError(RunlaneError, TimeoutError):
    """The run exceeded its workflow's execution_timeout."""


class StepError(RunlaneError):
    """A step failed; raised on replay when the original exception type cannot be rebuilt."""

    def __init__(self, message: str | None = None, type: str = "Exception") -> None:
        self.type = type
        super().__init__(message)


class FatalStepError(StepError, FatalError):
    """A step failed with a fatal error whose own type cannot be rebuilt on replay (a subclass
    of ``FatalError`` defined by the application, or a remote worker's fatal error)."""


class GatherError(RunlaneError):
    """One or more operations of a fan-out failed."""

    def __init__(self, failures: list[dict[str, Any]]) -> None:
        self.failures = failures
        first = failures[0] if failures else {}
        super().__init__(
            f"{len(failures)} operation(s) failed; first at index {first.get('index')}:"
            f" {first.get('error', {}).get('message', '')}"
        )


class ChildFailedError(RunlaneError):
    """A child workflow did not complete."""

    def __init__(self, child_id: str, error: dict[str, Any] | None = None) -> None:
        self.child_id = child_id
        self.error = error or {}
        super().__init__(
            f"child run {child_id!r} failed: {self.error.get('type', 'Error')}:"
            f" {self.error.get('message', '')}"
        )


class LeaseLostError(RunlaneError):
    """This instance no longer holds the run's lease; the turn's writes were refused."""


class RunCancelling(LeaseLostError):
    """The run was cancelled while this turn held its lease; settle it as cancelled."""


class RunPausing(RunlaneError):
    """The run was paused while this turn held its lease. The write that says so went through
    (its records are kept); the turn takes no further step and parks the run ``paused``.
    ``started`` is what the write started (children created with it)."""

    def __init__(self, run_id: str, started: list[Any] | None = None) -> None:
        self.run_id = run_id
        self.started = started or []
        super().__init__(f"run {run_id!r} was paused")


class StoreUnavailableError(RunlaneError):
    """The store could not be reached (connection lost, server restarting, database locked).

    Nothing was decided by it: a run's turn that meets it is abandoned and recovered from its
    checkpoints, and an API call raises it only after one retry on a fresh connection. The
    driver's own error is ``cause`` (and ``__cause__``).
    """

    def __init__(self, message: str | None = None, cause: BaseException | None = None) -> None:
        self.cause = cause
        if message is None and cause is not None:
            message = f"the store is unavailable: {type(cause).__name__}: {cause}".strip()
        super().__init__(message)
        if cause is not None:
            self.__cause__ = cause


class _ControlFlow(BaseException):
    """Unwinds a workflow body; user code catching ``Exception`` must never swallow it."""


class Suspend(_ControlFlow):
    """The turn cannot go further now: the run suspends until something wakes it."""


class NewerCode(Suspend):
    """The history holds a patch marker this code does not know: newer code (deployed to
    another engine or worker) recorded it. The run is left for code that has the patch: it
    suspends, due again a little later, and is never failed for it."""

    def __init__(self, run_id: str, seq: int, change_id: str) -> None:
        super().__init__()
        self.run_id, self.seq, self.change_id = run_id, seq, change_id

    def __str__(self) -> str:
        return (
            f"run {self.run_id!r} op #{self.seq}: its history has patch {self.change_id!r},"
            " which this code does not know (newer code recorded it)"
        )


class ContinueAsNew(_ControlFlow):
    """The body asked to end this run and continue in a fresh one."""

    def __init__(self, input: Any) -> None:
        super().__init__()
        self.input = input


class Cancelling(_ControlFlow):
    """The run was cancelled while the turn was executing."""


class Pausing(Suspend):
    """The run was asked to pause while the turn was executing: it takes no further step, and
    its suspension parks it ``paused``."""


class Abandon(_ControlFlow):
    """The turn stops here: this instance lost the run's lease, or the store became unreachable.

    ``outage`` is the store's error in the second case: the turn then gives the run back (due
    now, with what it recorded) if the store takes that write, else its lease expires.
    """

    def __init__(self, outage: BaseException | None = None) -> None:
        super().__init__()
        self.outage = outage


def error_dict(exc: BaseException, *, with_traceback: bool = True) -> dict[str, Any]:
    """The stored form of an exception: type, message, whether it is fatal (``FatalError`` or
    a subclass: never retried), traceback and rebuildable attributes."""
    result: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, FatalError):
        result["fatal"] = True
    attrs = {k: v for k, v in vars(exc).items() if not k.startswith("_") and _plain(v)}
    if attrs and type(exc).__name__ in _REBUILDABLE:
        result["attrs"] = attrs
    if with_traceback and exc.__traceback__ is not None:
        result["traceback"] = "".join(traceback.format_exception(exc))
    cause = exc.__cause__
    if cause is not None:
        result["cause"] = error_dict(cause, with_traceback=False)
    return result


ATTEMPTS_KEPT = 20
"""How many failed attempts a step's error lists at most (the latest ones)."""


def with_attempt(
    error: dict[str, Any],
    earlier: dict[str, Any] | None,
    attempt: int,
    started_at: datetime,
    finished_at: datetime,
) -> dict[str, Any]:
    """A step attempt's stored error with the history of the step's failed attempts:
    ``attempts`` lists each one's ``attempt``, ``started_at``, ``finished_at`` (ISO-8601),
    ``type`` and ``message``, oldest first, the earlier ones carried over from ``earlier`` (the
    error the step's record held), at most ``ATTEMPTS_KEPT``. A step record holds only its
    latest attempt's times; this is where a retried step's others are kept."""
    history = list((earlier or {}).get("attempts") or [])
    history.append(
        {
            "attempt": attempt,
            "started_at": started_at.isoformat(),
            "finished_at": finished_at.isoformat(),
            "type": error.get("type"),
            "message": error.get("message"),
        }
    )
    return {**error, "attempts": history[-ATTEMPTS_KEPT:]}


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def is_fatal(error: dict[str, Any]) -> bool:
    """Whether a stored (or reported) error must never be retried.

    ``fatal`` is what decides; a record without it (a worker that predates the field) is fatal
    when its type is exactly ``FatalError``.
    """
    return bool(error.get("fatal")) or error.get("type") == "FatalError"


def rebuild_error(error: dict[str, Any]) -> Exception:
    """Rebuild an exception from its stored dict, as faithfully as its type allows."""
    name = str(error.get("type", "Exception"))
    message = str(error.get("message", ""))
    if is_fatal(error) and name not in _REBUILDABLE:
        return FatalStepError(message, type=name)
    attrs = error.get("attrs") or {}
    cls = _REBUILDABLE.get(name)
    if cls is not None:
        try:
            exc: Exception = cls(**attrs) if attrs else cls(message)
            return exc
        except TypeError:
            pass
    candidate = getattr(builtins, name, None)
    if isinstance(candidate, type) and issubclass(candidate, Exception):
        try:
            return candidate(message)
        except TypeError:
            pass
    return StepError(message, type=name)


def raise_stored(error: dict[str, Any]) -> Exception:
    """Rebuild an error with its stored cause chained, ready to raise."""
    exc = rebuild_error(error)
    cause = error.get("cause")
    if isinstance(cause, dict):
        exc.__cause__ = rebuild_error(cause)
    return exc


_REBUILDABLE: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (
        ConcurrencyLimitError,
        SingletonQueueFullError,
        RateLimitError,
        KeyFunctionError,
        UnknownWorkflowError,
        FatalError,
        NonDeterminismError,
        PayloadCodecError,
        SignalTimeoutError,
        EventTimeoutError,
        UpdateTimeoutError,
        StepTimeoutError,
        ExecutionTimeoutError,
        ChildFailedError,
        SerializationError,
        GatherError,
        RunlaneError,
    )
}
