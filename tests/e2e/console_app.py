"""The engine the console's browser tests serve: runs of every kind a console shows (completed,
failed after retries, waiting for a signal or an update, asleep, blocked behind a singleton, parents with
children), a step queue and a schedule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import runlane
from runlane.stores.sqlite import SqliteStore


@runlane.step(name="shop.charge")
def charge(order: dict[str, Any]) -> dict[str, Any]:
    return {"charged": order["amount"], "currency": "EUR"}


@runlane.step(name="shop.explode", retry=runlane.Retry(max_attempts=2, backoff=0.05))
def explode(order: dict[str, Any]) -> None:
    raise ValueError(f"card declined for {order['customer']}")


@runlane.step(name="shop.render", queue="render-farm")
async def render(page: int) -> str:
    return f"page {page}"


@runlane.workflow(name="shop.ship-item")
async def ship_item(ctx: runlane.Context, item: str) -> str:
    return f"shipped {item}"


@runlane.workflow(name="shop.order", tags=["shop"])
async def order(ctx: runlane.Context, input: dict[str, Any]) -> Any:
    receipt = await ctx.step(charge, input)
    if input.get("hold"):
        await ctx.wait_for_signal("approve", timeout=3600)
    if input.get("ask"):
        update = await ctx.wait_for_update("address")
        if not update.payload:
            await ctx.reply(update, error="an address is needed")
            update = await ctx.wait_for_update("address")
        await ctx.reply(update, {"ships_to": update.payload})
    if input.get("nap"):
        await ctx.sleep(input["nap"])
    if input.get("fail"):
        await ctx.step(explode, input)
    shipped = await ctx.all([ctx.child(ship_item, item) for item in input.get("items", [])])
    pages = await ctx.all([ctx.step(render, n) for n in range(input.get("pages", 0))])
    return {"receipt": receipt, "shipped": shipped, "pages": pages}


@runlane.workflow(
    name="shop.sync", singleton=runlane.Singleton(key=lambda i: f"store:{i['store']}")
)
async def sync(ctx: runlane.Context, input: dict[str, Any]) -> str:
    await ctx.wait_for_signal("done")
    return "synced"


def build(db: Path) -> runlane.Engine:
    return runlane.Engine(
        SqliteStore(db),
        workflows=[order, sync],
        queues=[runlane.StepQueue("render-farm", concurrency=2)],
        schedules=[runlane.Schedule("nightly-sync", "shop.sync", every=3600, input={"store": "Z"})],
        poll_interval=0.05,
    )
