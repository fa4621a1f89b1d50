"""Fencing tokens: a payment gateway refuses the late request of a step's superseded execution.

The charge's first attempt sends its request to the gateway and times out while the request is
still on its way (a slow network); the retry charges again, under a greater fence. When the
first request finally arrives, the gateway refuses it: it has taken a greater fence for that
step already. One engine on a SQLite file.
"""

import asyncio
import tempfile
from pathlib import Path

import runlane
from runlane import Engine, Retry
from runlane.stores import SqliteStore


# --8<-- [start:gateway]
class StaleFence(Exception):
    """A write under a fence lower than one the gateway has taken for the same key."""


class Gateway:
    """The external system: it keeps the highest fence it has taken per key, and refuses a
    write under a lower one (an equal one is the same execution writing again)."""

    def __init__(self) -> None:
        self.fences: dict[str, int] = {}
        self.charged: list[tuple[str, int, int]] = []

    def charge(self, key: str, fence: int, amount: int) -> str:
        if fence < self.fences.get(key, 0):
            raise StaleFence(f"{key}: fence {fence} < {self.fences[key]}")
        self.fences[key] = fence
        self.charged.append((key, fence, amount))
        return f"ch-{key}-{fence}"


# --8<-- [end:gateway]

gateway = Gateway()
on_the_way: list[tuple[str, int, int]] = []  # requests sent and not arrived yet


# --8<-- [start:step]
@runlane.step(name="payments.charge", timeout=0.2, retry=Retry(max_attempts=2, backoff=0.05))
async def charge(order: dict) -> str:
    step = runlane.step_context()  # this execution: run id, seq, attempt, fence
    request = (step.step_id, step.fence, order["amount"])  # the key is "<run id>:<seq>"
    if step.attempt == 1:
        on_the_way.append(request)  # the network is slow: this attempt times out first
        await asyncio.sleep(3600)
    return gateway.charge(*request)


# --8<-- [end:step]


@runlane.workflow(name="checkout")
async def checkout(ctx: runlane.Context, order: dict) -> str:
    return await ctx.step(charge, order)


async def main() -> list[object]:
    store = SqliteStore(Path(tempfile.mkdtemp()) / "payments.db")
    async with Engine(store, workflows=[checkout], poll_interval=0.05) as engine:
        await engine.start(checkout, {"amount": 1200}, run_id="order-7")
        done = await engine.wait_for_run("order-7", timeout=10)
    print(done.output)  # ch-order-7:1-2: the retry's charge, under fence 2
    # --8<-- [start:late]
    [late] = on_the_way  # the first attempt's request arrives at last, under fence 1
    try:
        gateway.charge(*late)
    except StaleFence as refused:
        print(refused)  # order-7:1: fence 1 < 2
    # --8<-- [end:late]
    seen: list[object] = [done.output, gateway.charged]
    assert seen == ["ch-order-7:1-2", [("order-7:1", 2, 1200)]], seen
    return seen


if __name__ == "__main__":
    asyncio.run(main())
