"""A worker's turn knows whether its beats kept getting out (runlane.remote.replay.Pulse)."""

from __future__ import annotations

import pytest

from runlane.remote.replay import Pulse


class Clock:
    def __init__(self) -> None:
        self.at = 100.0

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr("runlane.remote.replay.time.monotonic", clock)
    return clock


def test_beats_closer_than_half_the_window_keep_the_turn_live(clock: Clock) -> None:
    pulse = Pulse(window=4.0)
    for _ in range(10):
        clock.at += 1.9
        assert pulse.live()
        pulse.beat_sent()
    assert pulse.live()


def test_silence_of_half_the_window_puts_the_turn_in_doubt_for_good(clock: Clock) -> None:
    pulse = Pulse(window=4.0)
    clock.at += 2.0
    assert not pulse.live()  # no beat got out yet: the engine may have sent the turn again
    pulse.beat_sent()  # a beat after the gap does not make it the awaited turn again
    assert not pulse.live()


def test_a_gap_between_two_beats_is_seen_even_when_nobody_asked_during_it(clock: Clock) -> None:
    pulse = Pulse(window=4.0)
    pulse.beat_sent()
    clock.at += 2.5  # the worker was frozen: it resumes and beats at once
    pulse.beat_sent()
    assert not pulse.live()


def test_a_task_that_names_no_window_is_always_live(clock: Clock) -> None:
    pulse = Pulse(window=None)
    clock.at += 1_000.0
    assert pulse.live()
