"""A rate-limited model API: at most 2 calls in flight across every run, paid tenants first."""

import asyncio

import runlane
from runlane import Engine, RateLimit, StepQueue
from runlane.stores import MemoryStore

llm = StepQueue(
    "llm",
    concurrency=2,  # calls in flight at once, across every run on every engine
    rate_limit=RateLimit(limit=60, period=60),  # and at most 60 admissions a minute
    fairness="key",  # among waiters of one priority, the tenant served least recently first
)
in_flight: list[str] = []
most_in_flight = 0


@runlane.step(name="llm.summarise", queue="llm")  # every call of the step goes through the queue
async def summarise(doc: str) -> str:
    global most_in_flight
    in_flight.append(doc)
    most_in_flight = max(most_in_flight, len(in_flight))
    await asyncio.sleep(0.05)  # the model thinking
    in_flight.remove(doc)
    return f"summary of {doc}"


@runlane.workflow(name="summarise-docs")
async def summarise_docs(ctx: runlane.Context, input: dict) -> list[str]:
    priority = 5 if input["paid"] else 0
    calls = [
        ctx.step(summarise, doc, priority=priority, fairness_key=input["tenant"])
        for doc in input["docs"]
    ]
    return await ctx.all(calls)


async def main() -> None:
    engine = Engine(MemoryStore(), workflows=[summarise_docs], queues=[llm], poll_interval=0.1)
    async with engine:
        for tenant, paid in [("acme", True), ("globex", False)]:
            docs = [f"{tenant}-{n}" for n in range(4)]
            input = {"tenant": tenant, "paid": paid, "docs": docs}
            await engine.start(summarise_docs, input, run_id=tenant)
        done = [await engine.wait_for_run(tenant, timeout=30) for tenant in ("acme", "globex")]
    assert [run.status for run in done] == ["completed", "completed"], done
    assert done[0].output == [f"summary of acme-{n}" for n in range(4)]
    assert most_in_flight <= 2, most_in_flight


if __name__ == "__main__":
    asyncio.run(main())
