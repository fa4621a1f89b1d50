"""LocalRuns: one task per run, follow-up turns for wakes that arrive mid-turn."""

from __future__ import annotations

import asyncio

from runlane.local import LocalRuns
from runlane.models import Claim


async def test_a_handed_off_timer_arriving_mid_turn_makes_the_next_claim_a_hand_off() -> None:
    # The lost wake: a result made the run due and its turn began (a plain claim); meanwhile a
    # timer poll handed the due run off (its wake time pushed a lease ahead) and the hand-off
    # message arrived here. The follow-up turn must claim as a hand-off, or the run waits a
    # whole lease for nothing.
    calls: list[tuple[str, bool]] = []
    first_turn = asyncio.Event()

    async def execute(run_id: str, handoff: bool, claim: Claim | None) -> list[str]:
        calls.append((run_id, handoff))
        if len(calls) == 1:
            await first_turn.wait()
        return []

    runs = LocalRuns(execute, lambda woken: False, lambda: True, 10)
    task = runs.spawn("r")  # the wake of the recorded result
    await asyncio.sleep(0)
    assert runs.spawn("r", handoff=True) is task  # the hand-off, while the turn is in flight
    first_turn.set()
    await task
    assert calls == [("r", False), ("r", True)]


async def test_a_poll_that_saw_the_turn_running_asks_for_no_second_turn() -> None:
    calls: list[tuple[str, bool]] = []
    release = asyncio.Event()

    async def execute(run_id: str, handoff: bool, claim: Claim | None) -> list[str]:
        calls.append((run_id, handoff))
        await release.wait()
        return []

    runs = LocalRuns(execute, lambda woken: False, lambda: True, 10)
    task = runs.spawn("r")
    await asyncio.sleep(0)
    runs.spawn("r", poll=True)
    release.set()
    await task
    assert calls == [("r", False)]
