"""A turn resumed past its lease starts no step of a run taken over meanwhile.

Found by ``make chaos`` (seed 2908526237): an engine claimed ``signal-00502`` and was frozen
(SIGSTOP) before its first step; another engine recovered the run after the 3 s lease and ran it
to the end; the frozen engine, resumed 5 s later, executed the first step again at once. Nothing
was staged before that step, so no fenced write came between the claim and the step, and a step
in flight is beyond any fence. A turn now confirms a lease that ran out by its engine's clock
before it starts a step.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import runlane
from runlane import RunStatus
from runlane.models import RetryTimer
from runlane.testing import ManualClock

from ..helpers import Calls

calls = Calls()
LEASE = 30.0


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    calls.counts.clear()


@runlane.step(name="fence.effect")
def effect(name: str) -> int:
    return calls.hit(name)


@runlane.workflow(name="fence.once")
async def once(ctx: runlane.Context, _: Any) -> int:
    return int(await ctx.step(effect, "effect"))


def freeze_after_claim(engine: Any, clock: ManualClock, meanwhile: Any = None) -> list[str]:
    """The engine's first claim returns only after its lease ran out (its process was frozen),
    and after ``meanwhile`` (another engine's pass) ran."""
    store, frozen = engine.store, list[str]()
    claim = store.claim_run

    async def claim_then_freeze(*args: Any, **kwargs: Any) -> Any:
        outcome = await claim(*args, **kwargs)
        if not frozen and outcome.claim is not None:
            frozen.append(outcome.claim.run.id)
            clock.advance(LEASE + 1)
            if meanwhile is not None:
                await meanwhile()
        return outcome

    store.claim_run = claim_then_freeze
    return frozen


async def test_a_turn_resumed_after_its_run_was_taken_over_starts_no_step(
    make_engine: Any, clock: ManualClock
) -> None:
    frozen_engine = await make_engine(once, lease=LEASE)
    other = await make_engine(once, lease=LEASE)
    frozen = freeze_after_claim(frozen_engine, clock, meanwhile=other.tick)
    run = await frozen_engine.start(once, None)
    await frozen_engine.tick()
    assert frozen == [run.id]
    done = await other.store.get_run(run.id)
    assert done is not None and done.status == RunStatus.COMPLETED and done.output == 1
    assert calls["effect"] == 1, "the resumed turn executed the step again"


async def test_a_turn_whose_lease_ran_out_untaken_confirms_it_and_goes_on(
    make_engine: Any, clock: ManualClock
) -> None:
    engine = await make_engine(once, lease=LEASE)
    freeze_after_claim(engine, clock)
    run = await engine.start(once, None)
    await engine.tick()
    done = await engine.store.get_run(run.id)
    assert done is not None and done.status == RunStatus.COMPLETED and done.output == 1
    assert calls["effect"] == 1


@runlane.step(name="fence.remote", group="fence")
def remote_effect(name: str) -> str:
    return name


@runlane.workflow(name="fence.remote-once")
async def remote_once(ctx: runlane.Context, _: Any) -> str:
    return str(await ctx.step(remote_effect, "r"))


@runlane.step(name="fence.remote-timed", group="fence", timeout=60.0)
def remote_timed_effect(name: str) -> str:
    return name


@runlane.workflow(name="fence.remote-timed-once")
async def remote_timed_once(ctx: runlane.Context, _: Any) -> str:
    return str(await ctx.step(remote_timed_effect, "r"))


@pytest.mark.parametrize("timeout", [None, 60.0])
async def test_a_turn_resumed_after_its_run_was_taken_over_sends_no_remote_task(
    make_engine: Any, clock: ManualClock, timeout: float | None
) -> None:
    # Found by CI's chaos run (seed 1032452600): an engine was frozen between the checkpoint
    # that records a remote attempt as sent and the send itself; another engine recovered the
    # run, re-sent the task and settled the run, and the frozen engine, resumed, sent the task
    # once more: a worker executed the step after its run (a singleton key's holder) had ended,
    # inside the next holder's body.
    from runlane.transports import InProcessTransport

    workflow = remote_once if timeout is None else remote_timed_once
    frozen_engine = await make_engine(workflow, lease=LEASE, transport=InProcessTransport())
    sent: list[str] = []
    remote = frozen_engine._execution.remote
    assert remote is not None
    dispatch = remote.dispatch

    async def recorded(group: str, task: Any) -> None:
        sent.append(str(task["step_id"]))
        await dispatch(group, task)

    remote.dispatch = recorded
    store, frozen = frozen_engine.store, list[str]()
    checkpoint = store.checkpoint

    async def checkpoint_then_freeze(run_id: str, owner: str, writes: Any, now: Any) -> Any:
        result = await checkpoint(run_id, owner, writes, now)
        if not frozen and any(r.status == "running" for r in writes.steps):
            frozen.append(run_id)
            clock.advance(LEASE + 1)
            # Another instance recovers the run (its turn would find the attempt sent).
            taken = await store.claim_run(
                run_id, "other:1", clock.now(), clock.now() + timedelta(seconds=LEASE),
                singleton_retry=RetryTimer(0.0, 0.0),
            )  # fmt: skip
            assert taken.claim is not None
        return result

    store.checkpoint = checkpoint_then_freeze
    run = await frozen_engine.start(workflow, None)
    await frozen_engine.tick()
    assert frozen == [run.id]
    assert sent == [], "the resumed turn sent the remote task of a run taken over"
