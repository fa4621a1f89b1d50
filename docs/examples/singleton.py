"""One inventory sync per store at a time: a singleton lane per key, the rest wait in order."""

import asyncio

import runlane
from runlane import Engine, Singleton
from runlane.stores import MemoryStore
from runlane.testing import ManualClock


@runlane.workflow(
    name="sync-inventory",
    singleton=Singleton(key=lambda input: f"store:{input['store_id']}", limit=1),
)
async def sync_inventory(ctx: runlane.Context, input: dict) -> str:
    await ctx.wait_for_signal("done")  # holds the store's slot until told
    return f"synced {input['store_id']} #{input['n']}"


async def main() -> None:
    # drive=False: the engine runs what is due only when tick() is called, so the example (and
    # its test) can look at the lane between two steps of time.
    engine = Engine(MemoryStore(), workflows=[sync_inventory], clock=ManualClock(), drive=False)
    async with engine:
        for run_id, store_id, n in [("a1", "A", 1), ("a2", "A", 2), ("b1", "B", 1)]:
            await engine.start(sync_inventory, {"store_id": store_id, "n": n}, run_id=run_id)
        await engine.tick()
        statuses = {r: (await engine.get_run(r)).status for r in ("a1", "a2", "b1")}
        # a1 holds store A's slot (waiting for its signal); a2 waits behind it; B is another lane.
        assert statuses == {"a1": "suspended", "a2": "blocked", "b1": "suspended"}, statuses
        holders = await engine.list_runs(tag="singleton:store:A")  # the lane, newest first
        assert [run.id for run in holders] == ["a2", "a1"]

        await engine.signal("a1", "done")
        await engine.tick()  # a1 completes; the same write hands its slot to a2
        assert (await engine.get_run("a1")).output == "synced A #1"
        assert (await engine.get_run("a2")).status == "suspended"  # a2 holds the slot now


if __name__ == "__main__":
    asyncio.run(main())
