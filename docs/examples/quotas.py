"""At most two reports in flight per tenant: the third start is refused at once."""

import asyncio

import runlane
from runlane import Concurrency, ConcurrencyLimitError, Engine
from runlane.stores import MemoryStore


@runlane.workflow(
    name="report",
    concurrency=Concurrency(key=lambda input: f"tenant:{input['tenant']}", limit=2),
)
async def report(ctx: runlane.Context, input: dict) -> str:
    return f"report {input['n']} for {input['tenant']}"


async def main() -> None:
    engine = Engine(MemoryStore(), workflows=[report], drive=False)
    async with engine:
        await engine.start(report, {"tenant": "acme", "n": 1})
        await engine.start(report, {"tenant": "acme", "n": 2})
        try:
            await engine.start(report, {"tenant": "acme", "n": 3})
        except ConcurrencyLimitError as exc:  # an HTTP API answers 429 here
            print(f"refused: {exc.key} has {exc.active} of {exc.limit} in flight")
        else:
            raise AssertionError("the quota let a third run in")
        await engine.start(report, {"tenant": "globex", "n": 1})  # another key, its own quota

        await engine.tick()  # the runs complete, and their slots are free again
        await engine.start(report, {"tenant": "acme", "n": 3})


if __name__ == "__main__":
    asyncio.run(main())
