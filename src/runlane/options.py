"""Engine options: one typed, validated object instead of a long keyword list."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypedDict

from .errors import ConfigurationError


@dataclass(frozen=True)
class EngineOptions:
    """Tuning knobs, all in seconds where they are durations."""

    lease: float = 30.0
    poll_interval: float = 1.0
    timer_batch_size: int = 500
    reconcile_interval: float = 300.0
    heartbeat_persist_throttle: float = 10.0
    remote_redispatch: float | None = None
    remote_redispatch_max: int | None = None
    remote_advance_silence: float | None = None
    # Remote workflows whose body this engine has: their turns are decided here, under the lease.
    in_process_turns: bool = False
    max_recovery_attempts: int | None = None
    singleton_retry: float = 1.0
    max_prefetch: int = 64
    max_local_runs: int = 256
    # Whether the engine records itself in the store (``list_engines``); a command-line tool's
    # short-lived engine does not.
    announce: bool = True

    def __post_init__(self) -> None:
        for name in ("lease", "poll_interval", "singleton_retry", "reconcile_interval"):
            if float(getattr(self, name)) <= 0:
                raise ConfigurationError(f"{name} must be positive")
        for name in ("timer_batch_size", "max_prefetch", "max_local_runs"):
            if int(getattr(self, name)) < 1:
                raise ConfigurationError(f"{name} must be at least 1")

    @classmethod
    def from_kwargs(cls, options: EngineKnobs | dict[str, Any]) -> EngineOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown engine option(s): {', '.join(unknown)}")
        return cls(**options)


class EngineKnobs(TypedDict, total=False):
    """The tuning knobs ``Engine(...)`` takes as keywords (``EngineOptions``' fields), so a type
    checker and the reference see them; ``tests/unit/test_options.py`` keeps the two in step."""

    lease: float
    poll_interval: float
    timer_batch_size: int
    reconcile_interval: float
    heartbeat_persist_throttle: float
    remote_redispatch: float | None
    remote_redispatch_max: int | None
    remote_advance_silence: float | None
    in_process_turns: bool
    max_recovery_attempts: int | None
    singleton_retry: float
    max_prefetch: int
    max_local_runs: int
    announce: bool
