"""runlane: durable workflows for Python with exact per-key flow control."""

from __future__ import annotations

from ._version import __version__ as __version__
from .codecs import Codec
from .context import Context
from .definitions import (
    DEFAULT_CONCURRENCY_STATUSES,
    Concurrency,
    Debounce,
    RateLimit,
    RemoteWorkflow,
    Singleton,
    step,
    workflow,
)
from .engine import Engine
from .errors import (
    ChildFailedError,
    ConcurrencyLimitError,
    ConfigurationError,
    DefinitionError,
    EventTimeoutError,
    FatalError,
    GatherError,
    KeyFunctionError,
    MissingExtraError,
    NonDeterminismError,
    NotInStepError,
    PayloadCodecError,
    RateLimitError,
    RunExistsError,
    RunFinishedError,
    RunlaneError,
    RunNotFoundError,
    ScheduleNotFoundError,
    SerializationError,
    SignalTimeoutError,
    SingletonQueueFullError,
    StepTimeoutError,
    StoreUnavailableError,
    UnknownWorkflowError,
    UnsupportedStoreError,
    UpdateRejectedError,
    UpdateTimeoutError,
)
from .fences import StepContext, step_context
from .models import Run, RunStatus, Settled, StepRecord
from .remote.worker import Worker
from .retention import Retention
from .retry import Retry
from .schedules import Schedule, ScheduleState
from .starts import Start, StartOutcome
from .step_queues import StepQueue
from .updates import Update

__all__ = [
    "DEFAULT_CONCURRENCY_STATUSES",
    "ChildFailedError",
    "Codec",
    "Concurrency",
    "ConcurrencyLimitError",
    "ConfigurationError",
    "Context",
    "Debounce",
    "DefinitionError",
    "Engine",
    "EventTimeoutError",
    "FatalError",
    "GatherError",
    "KeyFunctionError",
    "MissingExtraError",
    "NonDeterminismError",
    "NotInStepError",
    "PayloadCodecError",
    "RateLimit",
    "RateLimitError",
    "RemoteWorkflow",
    "Retention",
    "Retry",
    "Run",
    "RunExistsError",
    "RunFinishedError",
    "RunNotFoundError",
    "RunStatus",
    "RunlaneError",
    "Schedule",
    "ScheduleNotFoundError",
    "ScheduleState",
    "SerializationError",
    "Settled",
    "SignalTimeoutError",
    "Singleton",
    "SingletonQueueFullError",
    "Start",
    "StartOutcome",
    "StepContext",
    "StepQueue",
    "StepRecord",
    "StepTimeoutError",
    "StoreUnavailableError",
    "UnknownWorkflowError",
    "UnsupportedStoreError",
    "Update",
    "UpdateRejectedError",
    "UpdateTimeoutError",
    "Worker",
    "step",
    "step_context",
    "workflow",
]
