"""Remote steps and a remote workflow: the engine dispatches, workers of a group execute.

The engine and the workers only share the transport (Redis here); a worker never touches the
store. In production each is its own process (`runlane worker module:attribute` runs a Worker, an
Engine or a list of both until SIGTERM); here they share one event loop, to run as one script.
"""

import asyncio
import os

import runlane
from runlane import Engine, RemoteWorkflow, Retry, Worker
from runlane.stores import PostgresStore
from runlane.transports import RedisTransport


# A remote step: `group` sends it to the workers of "billing".
@runlane.step(name="billing.charge", group="billing", retry=Retry(max_attempts=3), timeout=30)
def charge(order: dict) -> dict:
    return {"order": order["id"], "charged": order["amount"]}


@runlane.workflow(name="checkout")
async def checkout(ctx: runlane.Context, order: dict) -> dict:
    # The engine runs this body; the charge goes out as a task, and the run suspends durably
    # until a worker's result comes back.
    return await ctx.step(charge, order)


# A remote workflow: its turns run on the workers of "ingest", which hold its code.
@runlane.step(name="ingest.parse")
def parse(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


@runlane.workflow(name="ingest", group="ingest")
async def ingest(ctx: runlane.Context, text: str) -> dict:
    rows = await ctx.step(parse, text)  # a local step of the workflow: it runs on the worker
    charged = await ctx.step("billing.charge", {"id": "bulk", "amount": len(rows)}, group="billing")
    return {"rows": len(rows), "charged": charged["charged"]}


def workers(redis_url: str, prefix: str = "runlane") -> list[Worker]:
    return [
        Worker(group="billing", transport=RedisTransport(redis_url, prefix=prefix), steps=[charge]),
        Worker(
            group="ingest",
            transport=RedisTransport(redis_url, prefix=prefix),
            workflows=[ingest],
            steps=[parse],
        ),
    ]


def engine(database_url: str, redis_url: str, prefix: str = "runlane") -> Engine:
    # This engine lacks the code of "ingest": it declares the workflow, its group and version.
    return Engine(
        PostgresStore(database_url),
        transport=RedisTransport(redis_url, prefix=prefix),
        workflows=[checkout],
        remote_workflows=[RemoteWorkflow("ingest", group="ingest")],
    )


async def main(database_url: str, redis_url: str, prefix: str = "runlane") -> list[object]:
    crew = workers(redis_url, prefix)
    running = [asyncio.create_task(worker.run()) for worker in crew]
    app = engine(database_url, redis_url, prefix)
    try:
        async with app:
            await app.start("checkout", {"id": "o-1", "amount": 30}, run_id="checkout-o-1")
            await app.start("ingest", "a\nb\n\nc\n", run_id="ingest-1")
            done = [await app.wait_for_run(r, timeout=60) for r in ("checkout-o-1", "ingest-1")]
    finally:
        for worker in crew:
            await worker.stop()  # finishes what it holds, then run() returns
        await asyncio.gather(*running)
        # Transports given as objects are yours to close (an engine given a URL closes its own).
        for transport in [app.transport, *(worker.transport for worker in crew)]:
            assert transport is not None
            await transport.close()
    outputs = [run.output for run in done]
    print(outputs)
    return outputs


if __name__ == "__main__":
    asyncio.run(main(os.environ["RUNLANE_DATABASE_URL"], os.environ["RUNLANE_REDIS_URL"]))
