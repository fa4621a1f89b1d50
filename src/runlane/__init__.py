"""runlane: durable workflows for Python with exact per-key flow control."""

from __future__ import annotations

from ._version import __version__ as __version__
from .context import Context
from .definitions import Concurrency, Singleton, step, workflow
from .engine import Engine
from .errors import (
    ChildFailedError,
    ConcurrencyLimitError,
    FatalError,
    GatherError,
    MissingExtraError,
    NonDeterminismError,
    RunExistsError,
    RunlaneError,
    SerializationError,
    SignalTimeoutError,
    SingletonQueueFullError,
    StepTimeoutError,
    StoreUnavailableError,
    UnknownWorkflowError,
    UnsupportedStoreError,
)
from .models import Run, RunStatus, Settled, StepRecord
from .retry import Retry
from .worker import Worker

__all__ = [
    "ChildFailedError",
    "Concurrency",
    "ConcurrencyLimitError",
    "Context",
    "Engine",
    "FatalError",
    "GatherError",
    "MissingExtraError",
    "NonDeterminismError",
    "Retry",
    "Run",
    "RunExistsError",
    "RunStatus",
    "RunlaneError",
    "SerializationError",
    "Settled",
    "SignalTimeoutError",
    "Singleton",
    "SingletonQueueFullError",
    "StepRecord",
    "StepTimeoutError",
    "StoreUnavailableError",
    "UnknownWorkflowError",
    "UnsupportedStoreError",
    "Worker",
    "step",
    "workflow",
]
