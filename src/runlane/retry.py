"""Retry policy for steps: attempts in total, exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .errors import DefinitionError


@dataclass(frozen=True)
class Retry:
    """``max_attempts`` executions in total; delays grow ``backoff * 2**(n-1)`` up to ``max_backoff``."""

    max_attempts: int = 1
    backoff: float = 1.0
    max_backoff: float = 60.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise DefinitionError("Retry.max_attempts must be at least 1")
        if self.backoff < 0 or self.max_backoff < 0:
            raise DefinitionError("Retry backoff values must not be negative")
        if not 0 <= self.jitter <= 1:
            raise DefinitionError("Retry.jitter must be between 0 and 1")

    def retry_in(self, attempt: int, fatal: bool) -> float | None:
        """Seconds until the next attempt after the ``attempt``-th failed; None when the step
        is out of attempts or the error was ``fatal`` (never retried)."""
        if fatal or attempt >= self.max_attempts:
            return None
        return self.delay(attempt)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failed execution (1-based)."""
        base = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        return float(base * (1 - self.jitter * random.random()))


NO_RETRY = Retry(max_attempts=1)
