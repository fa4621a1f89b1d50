"""The failure log of the run queue and remote dispatch: a transport that stays down is reported,
not shouted."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from runlane import faults
from runlane.faults import FAILURE_LOG_INTERVAL, RateLimitedLog


def test_a_recurring_failure_is_logged_once_a_minute_and_again_the_next_minute(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [5.0]
    monkeypatch.setattr(faults, "time", SimpleNamespace(monotonic=lambda: now[0]))
    failures = RateLimitedLog(logging.getLogger("runlane.run_queue"))
    with caplog.at_level(logging.WARNING, logger="runlane.run_queue"):
        for second in range(150):  # a failure every second for two and a half minutes
            now[0] = 5.0 + second
            failures.warning("run queue enqueue failed (%s)", second)
    assert FAILURE_LOG_INTERVAL == 60.0
    lines = [r.getMessage() for r in caplog.records if r.name == "runlane.run_queue"]
    assert lines == [f"run queue enqueue failed ({s})" for s in (0, 60, 120)]
