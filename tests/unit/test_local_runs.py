"""LocalRuns: one task per run, follow-up turns for wakes that arrive mid-turn."""

from __future__ import annotations

import asyncio
from typing import Any

from runlane.local_runs import LocalRuns
from runlane.models import Claim


async def test_a_handed_off_timer_arriving_mid_turn_makes_the_next_claim_a_hand_off() -> None:
    # The lost wake: a result made the run due and its turn began (a plain claim); meanwhile a
    # timer poll handed the due run off (its wake time pushed a lease ahead) and the hand-off
    # message arrived here. The follow-up turn must claim as a hand-off, or the run waits a
    # whole lease for nothing.
    calls: list[tuple[str, bool]] = []
    first_turn = asyncio.Event()

    async def execute(run_id: str, handoff: bool, claim: Claim | None, polled: bool) -> list[str]:
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


async def test_a_hand_off_made_before_the_turn_claims_makes_its_first_claim_a_hand_off() -> None:
    # A remote result landed here and its run's task was created; before the task claimed, this
    # instance's own timer poll found the run due and handed it off (its wake time pushed a lease
    # ahead), keeping it here. The task's first claim must be a hand-off: a plain one finds the
    # run not due, and nothing else claims it for a whole lease.
    calls: list[tuple[str, bool]] = []

    async def execute(run_id: str, handoff: bool, claim: Claim | None, polled: bool) -> list[str]:
        calls.append((run_id, handoff))
        return []

    runs = LocalRuns(execute, lambda woken: False, lambda: True, 10)
    task = runs.spawn("r")  # the landed result's turn, not started yet
    assert runs.spawn("r", handoff=True) is task
    await task
    assert calls == [("r", True)]


async def test_a_poll_that_saw_the_turn_running_asks_for_no_second_turn() -> None:
    calls: list[tuple[str, bool]] = []
    release = asyncio.Event()

    async def execute(run_id: str, handoff: bool, claim: Claim | None, polled: bool) -> list[str]:
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


async def test_two_runs_waking_each_other_mid_turn_both_end() -> None:
    # Each run's turn wakes the other while the other's turn is in flight, and each has a wake
    # of its own pending (so both take another turn). A task that waited for the follow-ups it
    # woke would wait for the other's task, which waits for it: neither would end, and a
    # drive=False tick awaiting them would hang.
    gates = {("a", 1): asyncio.Event(), ("c", 1): asyncio.Event(), ("a", 2): asyncio.Event()}
    turns: list[tuple[str, int]] = []

    async def execute(run_id: str, handoff: bool, claim: Claim | None, polled: bool) -> list[str]:
        turn = (run_id, 1 + sum(r == run_id for r, _ in turns))
        turns.append(turn)
        if turn in gates:
            await gates[turn].wait()
        return [{"a": "c", "c": "a"}[run_id]] if turn[1] == 1 else []

    runs = LocalRuns(execute, lambda woken: False, lambda: True, 10)
    a, c = runs.spawn_all(["a", "c"])
    await asyncio.sleep(0)
    runs.spawn("a"), runs.spawn("c")  # a wake for each, mid-turn: each takes a second turn
    for gate in gates.values():  # a's first turn ends (waking c), then c's, then a's second
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(a, c), 2)
    # a's third turn is c's wake of it, which came during a's second.
    assert sorted(turns) == [("a", 1), ("a", 2), ("a", 3), ("c", 1), ("c", 2)]
    assert not runs.inflight


async def test_once_draining_a_run_waiting_for_a_slot_is_dropped_but_a_leased_one_runs() -> None:
    release = asyncio.Event()
    accepting = True
    turns: list[str] = []

    async def execute(run_id: str, handoff: bool, claim: Claim | None, polled: bool) -> list[str]:
        turns.append(run_id)
        if run_id == "running":
            await release.wait()
        return []

    runs = LocalRuns(execute, lambda woken: False, lambda: accepting, 1)
    tasks = runs.spawn_all(["running", "waiting"])
    leased = Claim(_run("leased"), [], [])
    tasks.append(runs.spawn("leased", claim=leased))  # leased to this instance already
    await asyncio.sleep(0)
    accepting = False  # the drain begins while "running" holds the only slot
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 2)
    assert turns == ["running", "leased"]
    assert not runs.inflight


def _run(run_id: str) -> Any:
    from datetime import UTC, datetime

    from runlane.models import Run, RunStatus

    now = datetime.now(UTC)
    return Run(
        run_id, "w", "1", RunStatus.RUNNING, None, None, None, (), now, now, None, None, None, 0
    )
