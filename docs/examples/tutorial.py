"""The tutorial's application: an inventory sync that survives a kill (SQLite, no services)."""

import asyncio
import sys

import runlane
from runlane import Engine, Retry
from runlane.stores import SqliteStore


@runlane.step(name="inventory.pull", retry=Retry(max_attempts=3, backoff=1.0))
def pull(input: dict) -> dict:  # a sync step runs in a thread; an async one on the loop
    print(f"pulling the stock of store {input['store_id']}", flush=True)
    return {"store": input["store_id"], "skus": 1200}


@runlane.step(name="inventory.reconcile")
async def reconcile(stock: dict) -> dict:
    print(f"reconciling {stock['skus']} SKUs", flush=True)
    return {"reconciled": stock["skus"]}


@runlane.workflow(name="sync-inventory")
async def sync_inventory(ctx: runlane.Context, input: dict) -> dict:
    stock = await ctx.step(pull, input)  # checkpointed: never executed again once recorded
    await ctx.sleep(5)  # durable: the run holds no memory, and no process, while it waits
    return await ctx.step(reconcile, stock)


async def main(path: str = "tutorial.db") -> None:
    engine = Engine(SqliteStore(path), workflows=[sync_inventory], poll_interval=0.2)
    async with engine:  # runs the worker loop; drains on exit
        # A run id of your own makes the start idempotent: a second start returns this run.
        await engine.start(sync_inventory, {"store_id": "A"}, run_id="sync-A")
        done = await engine.wait_for_run("sync-A", timeout=60)
        print(done.status, done.output)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
