"""What registering a workflow brings along: its failure handlers and the decorated children its
body names, so a parent never fails at run time on a child nobody registered."""

from __future__ import annotations

import types
from typing import Any

import pytest

import runlane
from runlane import Engine
from runlane.registry import Registry
from runlane.stores import MemoryStore


@runlane.workflow(name="order.ship-item")
async def ship_item(ctx: runlane.Context, item: str) -> str:
    return f"shipped {item}"


@runlane.workflow(name="order.pack")
async def pack(ctx: runlane.Context, item: str) -> str:
    return f"packed {item}"


@runlane.workflow(name="order.label")
async def label(ctx: runlane.Context, item: str) -> str:
    return f"labelled {item}"


shipping = types.ModuleType("shipping")
shipping.label = label  # type: ignore[attr-defined]


@runlane.workflow(name="order")
async def order(ctx: runlane.Context, items: list[str]) -> list[Any]:
    packed = await ctx.all([ctx.child(pack, item) for item in items])  # in a comprehension
    await ctx.child(shipping.label, items[0])  # an attribute of a module the body names
    return [packed, await ctx.child(ship_item, items[0])]


@runlane.workflow(name="order.nested")
async def nested(ctx: runlane.Context, items: list[str]) -> Any:
    return await ctx.child(order, items)


def test_registering_a_parent_registers_the_decorated_children_its_body_names() -> None:
    registry = Registry([nested])
    assert registry.workflow_names == [
        "order",
        "order.label",
        "order.nested",
        "order.pack",
        "order.ship-item",
    ]


def test_a_child_registered_by_the_application_is_the_one_kept() -> None:
    @runlane.workflow(name="order.ship-item", version="2")
    async def ship_item_v2(ctx: runlane.Context, item: str) -> str:
        return item

    registry = Registry([order, ship_item_v2])
    assert registry.workflow("order.ship-item").version == "2"
    with pytest.raises(runlane.UnknownWorkflowError):
        registry.workflow("order.ship-item", "1")


async def test_a_parent_whose_children_were_not_listed_runs_them() -> None:
    engine = Engine(MemoryStore(), workflows=[order], drive=False)
    async with engine:
        await engine.start(order, ["book", "pen"], run_id="o1")
        for _ in range(6):
            await engine.tick()
        run = await engine.get_run("o1")
    assert run is not None and run.status == "completed", run
    assert run.output == [["packed book", "packed pen"], "shipped book"]
