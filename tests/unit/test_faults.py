"""Which errors are the plumbing's (abandon the turn, retry) and which are the workflow's."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import psycopg
import psycopg_pool
import pytest
import redis.exceptions

from runlane import FatalError, StoreUnavailableError
from runlane.errors import RunlaneError, StepTimeoutError
from runlane.faults import OutageLog, is_infrastructure, unavailable


def _locked_error(tmp_path: Path) -> sqlite3.OperationalError:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (a)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, isolation_level=None, timeout=0.01)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        return error
    finally:
        other.close()
        holder.close()
    raise AssertionError("the second writer was not refused")


def _sqlite_error(sql: str) -> sqlite3.OperationalError:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(sql)
    except sqlite3.OperationalError as error:
        return error
    finally:
        conn.close()
    raise AssertionError(f"{sql!r} did not fail")


@pytest.mark.parametrize(
    "error",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CannotConnectNow("the database system is starting up"),
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.SerializationFailure("could not serialize access"),
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
        psycopg.InterfaceError("the connection is closed"),
        psycopg_pool.PoolTimeout("couldn't get a connection after 10.00 sec"),
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379"),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
        redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(104, "Connection reset by peer"),
        StoreUnavailableError(cause=OSError("gone")),
        sqlite3.OperationalError("disk I/O error"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_outages_are_infrastructure(error: BaseException) -> None:
    assert is_infrastructure(error)


def test_sqlite_locked_past_the_busy_timeout_is_infrastructure(tmp_path: Path) -> None:
    error = _locked_error(tmp_path)
    assert "locked" in str(error)
    assert is_infrastructure(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("bad input"),
        KeyError("missing"),
        RuntimeError("boom"),
        TimeoutError("a step's own timeout"),
        OSError("no such file"),
        FatalError("card declined"),
        StepTimeoutError("step took too long"),
        RunlaneError("something else"),
        psycopg.DataError("invalid input syntax"),
        psycopg.errors.UniqueViolation("duplicate key"),
        psycopg.ProgrammingError("syntax error"),
        redis.exceptions.ResponseError("WRONGTYPE Operation against a key"),
        redis.exceptions.DataError("Invalid input of type"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_the_workflows_own_errors_are_not_infrastructure(error: BaseException) -> None:
    assert not is_infrastructure(error)


def test_a_sqlite_programming_error_is_not_infrastructure() -> None:
    error = _sqlite_error("SELECT * FROM no_such_table")
    assert not is_infrastructure(error)
    assert not is_infrastructure(_sqlite_error("SELEC nonsense"))


def test_unavailable_carries_the_drivers_error() -> None:
    cause = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    error = unavailable(cause)
    assert isinstance(error, StoreUnavailableError) and isinstance(error, RunlaneError)
    assert error.cause is cause and error.__cause__ is cause
    assert "AdminShutdown" in str(error) and "administrator command" in str(error)


def test_the_outage_log_says_one_line_a_minute_and_one_when_the_store_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("runlane.test-outage")
    outage = OutageLog(logger)
    with caplog.at_level(logging.WARNING, logger="runlane.test-outage"):
        for n in range(500):
            outage.failed(psycopg.OperationalError("server closed the connection"), f"call {n}")
        assert outage.down
        outage.succeeded()
        outage.succeeded()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "unavailable" in lines[0] and "OperationalError" in lines[0]
    assert "available again" in lines[1]
    assert not outage.down


def test_a_flapping_store_is_reported_once_a_minute_not_once_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("runlane.test-flapping")
    recovered: list[None] = []
    outage = OutageLog(logger, on_recovered=lambda: recovered.append(None))
    with caplog.at_level(logging.WARNING, logger="runlane.test-flapping"):
        for _ in range(10):  # backends killed every few seconds: ten short outages
            outage.failed(psycopg.errors.AdminShutdown("terminating connection"), "a call")
            outage.failed(psycopg.OperationalError("server closed the connection"), "a call")
            outage.succeeded()
        outage.interval = 0.0  # a minute later
        outage.failed(psycopg.OperationalError("server closed the connection"), "a call")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "unavailable" in lines[0] and "available again" in lines[1]
    assert "20 failed call(s) since the last report" in lines[2], lines[2]
    assert len(recovered) == 10  # the loop hears of every recovery, said or not
