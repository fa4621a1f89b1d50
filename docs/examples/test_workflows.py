"""Testing a workflow: a manual clock and explicit ticks, so a 1-hour sleep takes no time."""

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import runlane
from runlane import Engine, SignalTimeoutError
from runlane.stores import MemoryStore
from runlane.testing import ManualClock


@runlane.step(name="mail.send")
def send_mail(to: str) -> str:
    return f"mailed {to}"


@runlane.workflow(name="signup")
async def signup(ctx: runlane.Context, user: dict) -> str:
    await ctx.step(send_mail, user["email"])
    try:
        await ctx.wait_for_signal("confirmed", timeout=3600)
    except SignalTimeoutError:
        return "expired"
    await ctx.sleep(60)
    return "welcome"


@pytest_asyncio.fixture
async def engine() -> AsyncIterator[Engine]:
    # drive=False: nothing runs until the test calls tick() (or a phase such as run_pending()).
    async with Engine(MemoryStore(), workflows=[signup], clock=ManualClock(), drive=False) as e:
        yield e


@pytest.mark.asyncio
async def test_a_confirmed_signup_is_welcomed_a_minute_later(engine: Engine) -> None:
    await engine.start(signup, {"email": "ada@example.org"}, run_id="s1")
    await engine.tick()  # mails, then waits for the signal
    assert (await engine.get_run("s1")).status == "suspended"
    steps = await engine.list_steps("s1")
    assert [(s.name, s.output) for s in steps][:1] == [("mail.send", "mailed ada@example.org")]

    await engine.signal("s1", "confirmed")
    await engine.tick()  # the signal wakes it; now it sleeps a minute
    engine.clock.advance(60)
    await engine.tick()

    assert (await engine.get_run("s1")).output == "welcome"


@pytest.mark.asyncio
async def test_an_unconfirmed_signup_expires_after_an_hour(engine: Engine) -> None:
    await engine.start(signup, {"email": "bob@example.org"}, run_id="s2")
    await engine.tick()

    engine.clock.advance(3600)
    await engine.tick()

    assert (await engine.get_run("s2")).output == "expired"
