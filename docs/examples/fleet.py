"""A fleet on PostgreSQL and Redis: engines that run workflows, and a web process that starts them.

In production each engine is its own process (or host), all built by `instance()` against the
same database and Redis; here two of them and the producer share one event loop so the example
runs as one script.
"""

import asyncio
import os

import runlane
from runlane import Engine
from runlane.stores import PostgresStore
from runlane.transports import RedisTransport


@runlane.step(name="invoice.render")
def render(order: dict) -> dict:
    return {"order": order["id"], "pages": 2}


@runlane.step(name="invoice.send")
async def send(invoice: dict) -> str:
    return f"sent invoice {invoice['order']}"


@runlane.workflow(name="invoice")
async def invoice(ctx: runlane.Context, order: dict) -> str:
    rendered = await ctx.step(render, order)
    return await ctx.step(send, rendered)


def instance(database_url: str, redis_url: str, prefix: str = "runlane") -> Engine:
    """An engine of the fleet: it runs the workflows, whichever process started them."""
    transport = RedisTransport(redis_url, prefix=prefix)
    return Engine(PostgresStore(database_url), transport=transport, workflows=[invoice])


def producer(database_url: str, redis_url: str, prefix: str = "runlane") -> Engine:
    """A web process's engine: it starts runs and reads them, and executes none."""
    transport = RedisTransport(redis_url, prefix=prefix)
    return Engine(
        PostgresStore(database_url),
        transport=transport,
        workflows=[invoice],  # to start a workflow by name, the producer knows its definition
        drive=False,
        consumers="never",
    )


async def main(database_url: str, redis_url: str, prefix: str = "runlane") -> list[str]:
    web = producer(database_url, redis_url, prefix)
    fleet = [instance(database_url, redis_url, prefix) for _ in range(2)]
    async with web, fleet[0], fleet[1]:
        runs = [await web.start("invoice", {"id": n}, run_id=f"invoice-{n}") for n in range(10)]
        done = [await web.wait_for_run(run.id, timeout=60) for run in runs]
    for engine in [web, *fleet]:  # a transport given to an engine as an object is yours to close
        assert engine.transport is not None
        await engine.transport.close()
    outputs = [run.output for run in done]
    print(outputs)
    return outputs


if __name__ == "__main__":
    asyncio.run(main(os.environ["RUNLANE_DATABASE_URL"], os.environ["RUNLANE_REDIS_URL"]))
