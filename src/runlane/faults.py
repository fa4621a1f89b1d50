"""Which errors are the plumbing's and which are the workflow's.

An infrastructure error (a store or transport that cannot be reached right now: a connection
lost, a server shutting down or restarting, a deadlock or serialization failure, a database
locked past its busy timeout, Redis gone) never settles a run, never counts as a step attempt and
never reaches a workflow body: the turn is abandoned and the run recovered from its checkpoints.
Every other error raised by a step or a body is the workflow's own, recorded and retried per its
``Retry``. Errors a step body raises are always the workflow's, whatever their type: a step that
talks to a database of its own and loses its connection has failed, and its retry policy applies.

The drivers are recognised by class name, so this module imports none of them.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from .errors import StoreUnavailableError

OUTAGE_LOG_INTERVAL = 60.0
FAILURE_LOG_INTERVAL = 60.0

_INFRASTRUCTURE_CLASSES = frozenset(
    {
        # Connection lost or refused, server shutting down, pool checkout timed out, deadlock,
        # serialization failure, statement cancelled, out of disk (SQLSTATE classes 08, 40, 53,
        # 57, 58 and the driver's own connection errors are all OperationalError).
        "psycopg.OperationalError",
        "psycopg.InterfaceError",  # the connection was closed under the call
        "psycopg.errors.ReadOnlySqlTransaction",  # a failover left the pool on a standby
        "redis.exceptions.ConnectionError",  # includes BusyLoadingError (a restart loading data)
        "redis.exceptions.TimeoutError",
        "redis.exceptions.ReadOnlyError",  # a failover left the client on a replica
    }
)

# SQLite's primary result codes that say "not now" rather than "never": busy or locked past the
# busy timeout, I/O error, disk full, file not openable, out of memory, lock protocol error.
_SQLITE_TRANSIENT = frozenset({5, 6, 7, 10, 13, 14, 15})
_SQLITE_TRANSIENT_TEXT = ("locked", "disk i/o", "disk is full", "unable to open", "rolled back")


def is_infrastructure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a store or transport call, is an outage rather than a verdict."""
    if isinstance(exc, StoreUnavailableError | ConnectionError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return _sqlite_transient(exc)
    return any(
        f"{cls.__module__}.{cls.__qualname__}" in _INFRASTRUCTURE_CLASSES
        for cls in type(exc).__mro__
    )


def _sqlite_transient(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _SQLITE_TRANSIENT
    text = str(exc).lower()
    return any(part in text for part in _SQLITE_TRANSIENT_TEXT)


def unavailable(exc: BaseException) -> StoreUnavailableError:
    """A driver's outage error as the typed error API callers see (raise it ``from exc``)."""
    return StoreUnavailableError(cause=exc)


class RateLimitedLog:
    """Logs a recurring failure at most once per interval."""

    def __init__(self, logger: logging.Logger, interval: float = FAILURE_LOG_INTERVAL) -> None:
        self._log = logger
        self.interval = interval
        self._last = -interval

    def warning(self, message: str, *args: Any) -> None:
        if time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            self._log.warning(message, *args)


class OutageLog:
    """What an engine says while its store is unreachable: one warning a minute, however many
    calls fail (each line counts the failures it stands for), and one line when an outage it
    reported is over. A store that flaps (a connection-killing proxy, a failover in progress)
    is reported the same way: an outage that begins within the minute of the last report is
    only counted, in the next one."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = OUTAGE_LOG_INTERVAL,
        on_recovered: Callable[[], None] | None = None,
    ) -> None:
        self._log = logger
        self.interval = interval
        self._on_recovered = on_recovered
        self.since: float | None = None  # monotonic time of the first failure of this outage
        self._last = -interval
        self._unsaid = 0
        self._reported = False  # whether this outage was reported (so its end is, too)

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException, doing: str) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
        self._unsaid += 1
        if now - self._last >= self.interval:
            self._log.warning(
                "the store is unavailable (%s while %s; %d failed call(s) since the last report);"
                " runs wait and resume when it is back",
                _describe(exc),
                doing,
                self._unsaid,
            )
            self._last, self._unsaid, self._reported = now, 0, True

    def succeeded(self) -> None:
        if self.since is None:
            return
        if self._reported:
            self._log.warning(
                "the store is available again after %.1fs", time.monotonic() - self.since
            )
        self.since, self._reported = None, False
        if self._on_recovered is not None:
            self._on_recovered()


def _describe(exc: BaseException) -> str:
    cause = exc.cause if isinstance(exc, StoreUnavailableError) and exc.cause else exc
    return f"{type(cause).__name__}: {str(cause).strip()}"


__all__ = ["OUTAGE_LOG_INTERVAL", "OutageLog", "is_infrastructure", "unavailable"]
