"""The run queue's failure log: a run queue that stays down is reported, not shouted."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from runlane import runqueue as runqueue_module
from runlane.runqueue import FAILURE_LOG_INTERVAL, RateLimitedLog


def test_a_recurring_failure_is_logged_once_a_minute_and_again_the_next_minute(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [5.0]
    monkeypatch.setattr(runqueue_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    failures = RateLimitedLog()
    with caplog.at_level(logging.WARNING, logger="runlane.runqueue"):
        for second in range(150):  # a failure every second for two and a half minutes
            now[0] = 5.0 + second
            failures.warning("run queue enqueue failed (%s)", second)
    assert FAILURE_LOG_INTERVAL == 60.0
    lines = [r.getMessage() for r in caplog.records if r.name == "runlane.runqueue"]
    assert lines == [f"run queue enqueue failed ({s})" for s in (0, 60, 120)]
