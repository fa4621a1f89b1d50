"""Two tenants on one store: each engine fenced to its namespace has lanes, quotas and reads
of its own; engines without scope_reads share them."""

import asyncio

import runlane
from runlane import Concurrency, ConcurrencyLimitError, Engine, RunNotFoundError, Singleton
from runlane.stores import MemoryStore


@runlane.workflow(
    name="sync",
    singleton=Singleton(key=lambda input: f"store:{input['store']}"),
    concurrency=Concurrency(key="erp-api", limit=1),
)
async def sync(ctx: runlane.Context, input: dict) -> str:
    return await ctx.wait_for_signal("done")


async def main() -> None:
    store = MemoryStore()  # one store (SQLite or PostgreSQL alike) for both tenants
    # --8<-- [start:fenced]
    eu = Engine(store, workflows=[sync], namespace="eu", scope_reads=True, drive=False)
    us = Engine(store, workflows=[sync], namespace="us", scope_reads=True, drive=False)

    await eu.start(sync, {"store": "A"}, run_id="eu-1")
    await us.start(sync, {"store": "A"}, run_id="us-1")  # same key, a lane and quota of its own
    await eu.tick()
    await us.tick()
    assert (await us.get_run("us-1")).status == "suspended"  # it holds us's lane, not blocked

    try:
        await eu.start(sync, {"store": "B"}, run_id="eu-2")
    except ConcurrencyLimitError as exc:  # eu's own "erp-api" quota is full
        print(f"eu refused: {exc.key} has {exc.active} of {exc.limit} in flight")
    else:
        raise AssertionError("eu's quota counted us's run")

    assert await eu.get_run("us-1") is None  # eu sees its own runs only
    assert [run.id for run in await eu.list_runs()] == ["eu-1"]
    try:
        await eu.signal("us-1", "done", "from eu")  # nor acts on another namespace's
    except RunNotFoundError:
        print("eu cannot signal us-1")
    else:
        raise AssertionError("eu signalled a run of us")
    # --8<-- [end:fenced]

    # --8<-- [start:shared]
    shared = Engine(MemoryStore(), workflows=[sync], namespace="eu", drive=False)
    other = Engine(shared.store, workflows=[sync], namespace="us", drive=False)
    await shared.start(sync, {"store": "A"}, run_id="eu-1")
    try:
        await other.start(sync, {"store": "B"}, run_id="us-1")  # one "erp-api" for both
    except ConcurrencyLimitError:
        print("without scope_reads, the namespaces share the quota")
    else:
        raise AssertionError("the unscoped namespaces did not share the quota")
    assert (await other.get_run("eu-1")).namespace == "eu"  # and every read
    # --8<-- [end:shared]


if __name__ == "__main__":
    asyncio.run(main())
