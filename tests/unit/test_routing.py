"""Where a run made due goes: one table over the instance's mode and why the run is due."""

from __future__ import annotations

import pytest

from runlane.routing import Mode, Reason, Recently, Where, where

Q, H, S = Where.QUEUE, Where.HERE, Where.STORE

# mode -> reason -> (with room, without room)
TABLE = {
    Mode.FLEET: {
        Reason.START: (Q, Q),
        Reason.WAKE: (Q, Q),
        Reason.LANDED: (H, Q),
        Reason.FOLLOW_UP: (Q, Q),
        Reason.TIMER: (Q, Q),
        Reason.RECOVERY: (Q, Q),
        Reason.UNSENT: (H, H),
    },
    Mode.PRODUCER: {
        Reason.START: (Q, Q),
        Reason.WAKE: (Q, Q),
        Reason.LANDED: (Q, Q),
        Reason.FOLLOW_UP: (H, H),
        Reason.TIMER: (H, H),
        Reason.RECOVERY: (H, H),
        Reason.UNSENT: (S, S),
    },
    Mode.ALONE: {
        Reason.START: (H, H),
        Reason.WAKE: (H, H),
        Reason.LANDED: (H, H),
        Reason.FOLLOW_UP: (H, H),
        Reason.TIMER: (H, H),
        Reason.RECOVERY: (H, H),
        Reason.UNSENT: (H, H),
    },
    Mode.IDLE: {
        Reason.START: (S, S),
        Reason.WAKE: (S, S),
        Reason.LANDED: (S, S),
        Reason.FOLLOW_UP: (H, H),
        Reason.TIMER: (H, H),
        Reason.RECOVERY: (H, H),
        Reason.UNSENT: (S, S),
    },
}


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("reason", list(Reason))
def test_a_due_run_goes_where_the_table_says(mode: Mode, reason: Reason) -> None:
    with_room, without_room = TABLE[mode][reason]
    assert where(mode, reason, room=True) is with_room
    assert where(mode, reason, room=False) is without_room


def test_a_result_landing_on_a_full_fleet_member_goes_to_the_run_queue() -> None:
    # It would wait here behind a full instance while another one has room.
    assert where(Mode.FLEET, Reason.LANDED, room=False) is Where.QUEUE


def test_a_run_found_again_within_the_window_is_sent_once() -> None:
    now = [100.0]
    sent = Recently(lambda: 30.0, clock=lambda: now[0])
    assert sent.fresh(["a", "b"]) == ["a", "b"]
    now[0] += 29.0
    assert sent.fresh(["a", "c"]) == ["c"]
    now[0] += 1.0
    assert sent.fresh(["a", "c"]) == ["a"]
