"""Changing a workflow while runs are in flight: a patch, a new version, and a replay check.

Two engines share one SQLite file, as the old and the new code of a rolling deploy do: the old
engine starts an order that waits for its approval; the new code adds a fraud check behind
``ctx.patched``, registers a version 2 of the report and replays the stored order before it
takes over.
"""

import asyncio
import tempfile
from pathlib import Path

import runlane
from runlane import Engine
from runlane.history import history_doc
from runlane.stores import SqliteStore
from runlane.testing import ManualClock


@runlane.step(name="orders.charge")
def charge(order: dict) -> str:
    return f"charged {order['amount']}"


@runlane.step(name="orders.fraud_check")
def fraud_check(order: dict) -> str:
    return "ok" if order["amount"] < 10_000 else "review"


# --8<-- [start:before]
@runlane.workflow(name="order")
async def order(ctx: runlane.Context, input: dict) -> str:
    approved_by = await ctx.wait_for_signal("approve")
    return f"{await ctx.step(charge, input)}, approved by {approved_by}"


# --8<-- [end:before]


# --8<-- [start:patched]
@runlane.workflow(name="order")
async def order_with_fraud_check(ctx: runlane.Context, input: dict) -> str:
    if ctx.patched("fraud-check"):  # new runs check; runs recorded before the change do not
        verdict = await ctx.step(fraud_check, input)
        if verdict != "ok":
            return f"held for {verdict}"
    approved_by = await ctx.wait_for_signal("approve")
    return f"{await ctx.step(charge, input)}, approved by {approved_by}"


# --8<-- [end:patched]


# --8<-- [start:versions]
@runlane.workflow(name="report", version="1")
async def report_v1(ctx: runlane.Context, month: str) -> str:
    return f"report for {month}"


@runlane.workflow(name="report", version="2")  # a new shape: a version, not a patch
async def report_v2(ctx: runlane.Context, month: str) -> dict:
    return {"month": month, "format": 2}


# --8<-- [end:versions]


async def main() -> None:
    folder = Path(tempfile.mkdtemp())
    clock = ManualClock()

    def engine(*workflows: object) -> Engine:
        store = SqliteStore(folder / "deploy.db")
        return Engine(
            store, workflows=workflows, steps=[charge, fraud_check], clock=clock, drive=False
        )

    old = engine(order, report_v1)
    async with old:
        await old.start(order, {"amount": 50}, run_id="old-order")
        await old.tick()  # it waits for its approval, recorded by the code before the change

        # --8<-- [start:replay]
        # Before deploying: replay the stored runs against the new code (what `runlane replay
        # APP` does for every run of an app). A run the code cannot replay raises
        # NonDeterminismError, naming the position, the recorded and the new operation.
        run = await old.get_run("old-order")
        steps = await old.list_steps("old-order")
        signals = await old.read(lambda store: store.list_signals("old-order"))
        runlane.testing.replay(order_with_fraud_check, history_doc(run, steps, signals))
        # --8<-- [end:replay]

    new = engine(order_with_fraud_check, report_v1, report_v2)
    async with new:
        await new.start("order", {"amount": 80}, run_id="new-order")
        await new.tick()
        for run_id in ("old-order", "new-order"):
            await new.signal(run_id, "approve", "ada")
        await new.tick()
        assert (await new.get_run("old-order")).output == "charged 50, approved by ada"
        kinds = [s.kind for s in await new.list_steps("new-order")]
        assert kinds == ["patch", "step", "signal", "step"], kinds  # the marker, then the check

        # --8<-- [start:start-versions]
        latest = await new.start("report", "2026-11", run_id="nov")  # version 2: the latest
        pinned = await new.start("report", "2026-11", run_id="nov-v1", version="1")
        # --8<-- [end:start-versions]
        await new.tick()
        assert (latest.version, pinned.version) == ("2", "1")
        assert (await new.get_run("nov")).output == {"month": "2026-11", "format": 2}

        # --8<-- [start:engines]
        for info in await new.list_engines():
            print(info.id, info.alive, info.serves)  # [('order', '1'), ('report', '1'), ...]
        # --8<-- [end:engines]
        assert [e.serves for e in await new.list_engines()] == [
            (("order", "1"), ("report", "1"), ("report", "2"))
        ]


if __name__ == "__main__":
    asyncio.run(main())
